"""``onespeech models`` with revisions: each action is one call of the store's API, its errors printed."""

from __future__ import annotations

from typing import Any

import pytest

from onespeech.speech.cli import main

REVISION = "e" * 40  # the served models' revision (tests/conftest.py)


def test_models_revision_options(served_models: Any, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = ["models", "--catalog-dir", str(served_models.catalog)]
    model = served_models.asr_id
    assert main([*catalog, "verify", model]) == 1
    assert f"onespeech models fetch {model}" in capsys.readouterr().err
    assert main([*catalog, "fetch", model, "--revision", "f" * 40]) == 1
    assert f"pins revision {REVISION}" in capsys.readouterr().err
    assert main([*catalog, "fetch", model, "--revision", REVISION[:7]]) == 0
    capsys.readouterr()
    assert main([*catalog, "verify", model, "--revision", REVISION]) == 0
    assert "files verified" in capsys.readouterr().out
    assert main([*catalog, "remove", model, "--revision", "f" * 40]) == 1
    assert f"cached revisions ({REVISION})" in capsys.readouterr().err
    assert main([*catalog, "remove", model, "--revision", REVISION]) == 0
    assert "removed" in capsys.readouterr().out
    assert main([*catalog, "remove", model]) == 0  # nothing to do is not a failure
    assert "not cached" in capsys.readouterr().out


def test_models_commands_use_only_public_names() -> None:
    """No lock, no store constant, no private helper: only the store's public functions."""
    import ast
    import importlib
    import inspect

    from onespeech.speech.commands import models

    tree = ast.parse(inspect.getsource(models))
    imported = [(node.module or "", alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names if (node.module or "").startswith("onespeech.")]  # fmt: skip
    assert imported, "the command calls the store"
    private = [f"{module}.{name}" for module, name in imported
               if name.isupper() or name not in getattr(importlib.import_module(module), "__all__", ())]  # fmt: skip
    assert private == [], "onespeech models reaches into the store's internals"
