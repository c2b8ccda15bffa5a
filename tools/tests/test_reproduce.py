"""qwen-reproduce: comparison helpers, missing observations, and a live tiny case."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from onespeech_tools.asr_parity import paired_misses
from onespeech_tools.cli import main
from onespeech_tools.commands.reproduce import agreement, reference_ids, relative_error

PUBLISHER_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "chat_template.json",
                   "tokenizer_config.json", "vocab.json", "merges.txt", "model.safetensors")  # fmt: skip


def test_relative_error_and_token_helpers() -> None:
    ref = np.array([1.0, -4.0, 2.0], dtype=np.float32)
    assert relative_error(ref + np.float32(4e-4) * np.array([0, 1, 0], np.float32), ref) == pytest.approx(1e-4, rel=1e-3)
    assert relative_error(ref[:2], ref) == float("inf")
    assert reference_ids([5, 6, 151645, 9]) == ([5, 6], True)
    assert reference_ids([5, 6]) == ([5, 6], False)
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 2


def test_paired_misses_counts_discordant_steps_and_their_sign_test() -> None:
    misses = [("a", "ours", 3, 0.1), ("a", "reference", 3, 0.1), ("a", "ours", 7, 0.2),
              ("b", "ours", 3, 0.05), ("b", "reference", 9, 0.3)]  # fmt: skip
    paired = paired_misses(misses)
    # a/3 both; a/7 and b/3 ours alone (the same step number in another case is another step); b/9 the reference's
    assert (paired.ours_only, paired.reference_only, paired.both) == (2, 1, 1)
    assert paired.p_ours_worse == pytest.approx(4 / 8)  # P(X >= 2), X ~ Bin(3, 1/2)
    lopsided = paired_misses([("c", "ours", step, 0.1) for step in range(6)])
    assert lopsided.p_ours_worse == pytest.approx(1 / 64)
    assert paired_misses([]).p_ours_worse == 1.0
    assert paired_misses([("c", "reference", 1, 0.1)]).p_ours_worse == 1.0  # ours missed nothing alone
    with pytest.raises(ValueError, match="neither"):
        paired_misses([("c", "theirs", 1, 0.1)])


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
    checkpoint.mkdir()
    for name in PUBLISHER_FILES:
        shutil.copyfile(folder / "ckpt" / name, checkpoint / name)
    code = main(["qwen-reproduce", "--observations", str(oracle_observations), "--size", "tiny",
                 "--checkpoint", str(checkpoint), "--cases", "ja_auto", "--no-windowed"])  # fmt: skip
    out = capsys.readouterr().out
    assert "ja_auto" in out and "64/64" in out
    assert code == 0, out


def test_live_tiny_bf16(oracle_observations: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    fp32, bf16 = oracle_observations / "asr" / "tiny", oracle_observations / "asr" / "tiny-bf16"
    if not (fp32 / "cases.json").is_file() or not (bf16 / "cases.json").is_file():
        pytest.skip("needs the tiny FP32 and BF16 Qwen3-ASR observations (tox -e oracle)")
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    for name in PUBLISHER_FILES:
        shutil.copyfile(bf16 / "ckpt" / name, checkpoint / name)
    code = main(["qwen-reproduce", "--observations", str(oracle_observations), "--size", "tiny", "--precision", "bf16",
                 "--checkpoint", str(checkpoint), "--cases", "ja_auto", "jfk_english_forced"])  # fmt: skip
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert any(row[:2] == ["ja_auto", "ours"] for row in rows), out
    assert any(row[:2] == ["jfk_english_forced", "ours"] for row in rows), out
    assert sum(row[:1] == ["reference"] for row in rows) == 2, out
    # the verdict follows the teacher-forced counts (the oracle records them after the FP32 run);
    # observations recorded before that have no "forced_agree" and only the prefix to compare
    recorded = json.loads((bf16 / "cases.json").read_text())["cases"]
    if not any("forced_agree" in case for case in recorded):
        pytest.skip("the tiny BF16 observations predate teacher forcing (rerun tox -e oracle)")
    forced = out.split("steps agreeing with FP32 when its ids are fed: ")[1].splitlines()[0]
    ours = int(forced.split("ours-BF16 ")[1].split("/")[0])
    reference = int(forced.split("reference-BF16 ")[1].split("/")[0])
    assert ours > 0 and reference > 0, out
    assert code == (0 if ours >= reference else 1), out
    # every step a run leaves the FP32 id at is listed with FP32's margin there
    total = int(forced.split("/")[1].split(",")[0])
    listed = out.split("FP32's top-2 margin there (logits):\n")[1].split("\npass")[0].split("\nFAIL")[0]
    runs = [line.split()[3] for line in listed.splitlines() if line.startswith("  ")]
    assert runs.count("ours") == total - ours and runs.count("reference") == total - reference, out


def test_bf16_missing_observations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qwen-reproduce", "--observations", str(tmp_path), "--size", "tiny", "--precision", "bf16"]) == 2
    assert "--dtype bfloat16" in capsys.readouterr().out
