"""qwen-reproduce: comparison helpers, missing observations, and a live tiny case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech_tools.cli import main
from onespeech_tools.commands.reproduce import agreement, reference_ids, relative_error


def test_relative_error_and_token_helpers() -> None:
    ref = np.array([1.0, -4.0, 2.0], dtype=np.float32)
    assert relative_error(ref + np.float32(4e-4) * np.array([0, 1, 0], np.float32), ref) == pytest.approx(1e-4, rel=1e-3)
    assert relative_error(ref[:2], ref) == float("inf")
    assert reference_ids([5, 6, 151645, 9]) == ([5, 6], True)
    assert reference_ids([5, 6]) == ([5, 6], False)
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 2


def test_missing_observations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qwen-reproduce", "--observations", str(tmp_path), "--size", "tiny"]) == 2
    assert "oracle_asr.py" in capsys.readouterr().out


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["qwen-reproduce", "--help"])
    assert info.value.code == 0
    assert "--observations" in capsys.readouterr().out


def test_live_tiny_case(oracle_observations: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    folder = oracle_observations / "asr" / "tiny"
    if not (folder / "cases.json").is_file():
        pytest.skip("needs the tiny Qwen3-ASR observations (tox -e oracle)")
    checkpoint = tmp_path / "ckpt"
    publisher = ("config.json", "generation_config.json", "preprocessor_config.json", "chat_template.json",
                 "tokenizer_config.json", "vocab.json", "merges.txt", "model.safetensors")  # fmt: skip
    checkpoint.mkdir()
    for name in publisher:
        shutil.copyfile(folder / "ckpt" / name, checkpoint / name)
    code = main(["qwen-reproduce", "--observations", str(oracle_observations), "--size", "tiny",
                 "--checkpoint", str(checkpoint), "--cases", "ja_auto", "--no-windowed"])  # fmt: skip
    out = capsys.readouterr().out
    assert "ja_auto" in out and "64/64" in out
    assert code == 0, out
