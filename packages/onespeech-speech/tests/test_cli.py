from pathlib import Path

import pytest

from onespeech.speech.cli import main


def test_version_prints_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == "onespeech 0.1.0"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: onespeech" in capsys.readouterr().err


def test_tokenize_prints_ids(tokenizer_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", str(tokenizer_dir), "Hello world"]) == 0
    assert capsys.readouterr().out.split() == ["9707", "1879"]


def test_tokenize_refuses_special_spelling(tokenizer_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", str(tokenizer_dir), "<|im_start|>"]) == 1
    assert "onespeech tokenize:" in capsys.readouterr().err
