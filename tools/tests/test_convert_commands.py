"""qwen-convert / qwen-convert-bf16 front ends."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import onespeech.qwen3.runtime  # noqa: F401  (plain import: a broken module fails, it is not skipped)
from onespeech_tools.checkpoints import make_checkpoint
from onespeech_tools.cli import main


@pytest.fixture(scope="module")
def publisher(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("pub"), "tiny", seed=11, data_dir=shared_data)


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("qwen-convert", "qwen-convert-bf16"):
        with pytest.raises(SystemExit) as info:
            main([command, "--help"])
        assert info.value.code == 0
        assert "--out" in capsys.readouterr().out


def test_convert_into_out_dir_then_bf16_beside(publisher: Path, tmp_path: Path, capsys) -> None:
    from onespeech.qwen3.runtime import load_runtime

    out = tmp_path / "runtime"
    assert main(["qwen-convert", str(publisher), "--out", str(out), "--revision", "abc123"]) == 0
    printed = capsys.readouterr().out
    assert "fp32-decoder-00.ost" in printed and "manifest.fp32.json" in printed
    assert not list(out.glob(".staging-*"))
    with load_runtime(out, "fp32") as model:
        assert model.manifest.metadata["revision"] == "abc123"
    assert main(["qwen-convert-bf16", str(publisher), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(out / "manifest.bf16.json")
    with load_runtime(out, "bf16") as model, load_runtime(out, "fp32") as model32:
        assert model["thinker.model.norm.weight"].dtype.name == "uint16"
        assert model32["thinker.model.norm.weight"].dtype.name == "float32"
    assert not any(p.name.startswith("bf16") for p in publisher.iterdir())


def test_in_place(publisher: Path, tmp_path: Path, capsys) -> None:
    source = tmp_path / "model"
    shutil.copytree(publisher, source)
    assert main(["qwen-convert", str(source)]) == 0
    assert (source / "manifest.fp32.json").is_file()


def test_not_a_model_directory(tmp_path: Path, capsys) -> None:
    assert main(["qwen-convert", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_busy_directory(publisher: Path, tmp_path: Path, capsys) -> None:
    from onespeech.kernels.lock import DirectoryLock

    out = tmp_path / "busy"
    out.mkdir()
    # a lock held through another open file description conflicts like another process
    with DirectoryLock(out):
        assert main(["qwen-convert", str(publisher), "--out", str(out)]) == 3
    assert "retry after the other process completes" in capsys.readouterr().err
