"""The shared-data lookup used by the oracles, benchmarks, generator and conftest."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech_tools import data


def _make_data(root: Path) -> Path:
    folder = root / "shared" / "data"
    folder.mkdir(parents=True)
    (folder / data.MARKER).write_text("sources\n", encoding="utf-8")
    return folder


def test_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _make_data(tmp_path / "elsewhere")
    monkeypatch.setenv("ONESPEECH_TEST_DATA", str(folder))
    assert data.find_shared_data() == folder


def test_wrong_environment_variable_does_not_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONESPEECH_TEST_DATA", str(tmp_path / "missing"))
    assert data.find_shared_data() is None
    with pytest.raises(data.SharedDataNotFound, match="has no SOURCES.md"):
        data.shared_data_dir()


def test_found_beside_the_checkout_from_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The layout CI uses: <root>/main is the clone, <root>/shared/data the data.
    folder = _make_data(tmp_path)
    checkout = tmp_path / "main" / "packages"
    checkout.mkdir(parents=True)
    monkeypatch.delenv("ONESPEECH_TEST_DATA", raising=False)
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(data, "__file__", str(tmp_path / "site-packages" / "onespeech_tools" / "data.py"))
    assert data.find_shared_data() == folder.resolve()


def test_scripts_skip_with_status_77(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ONESPEECH_TEST_DATA", str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        data.shared_data_or_skip("oracle_x")
    assert stop.value.code == data.SKIP_STATUS
    assert "oracle_x skipped: needs shared/data" in capsys.readouterr().out
