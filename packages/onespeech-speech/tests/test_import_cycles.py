"""The commands do not import ``cli`` (which imports them): the shared arguments live in ``arguments``."""

from __future__ import annotations

import ast
from pathlib import Path

import onespeech.speech

ROOT = Path(onespeech.speech.__file__).parent
PACKAGE = "onespeech.speech"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (anywhere in it: lazy imports count too)."""
    modules = {_module(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        # the package's __init__ only re-exports the API; an edge to it says nothing about a cycle
        graph[name] = {t for t in targets if t in modules and t not in (name, PACKAGE)}
    return graph


def test_the_commands_do_not_import_cli() -> None:
    graph = _graph()
    commands = [name for name in graph if name.startswith(f"{PACKAGE}.commands.")]
    assert commands and all(f"{PACKAGE}.cli" not in graph[name] for name in commands)
