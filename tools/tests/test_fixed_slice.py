"""fixed-slice: first N sorted LibriSpeech utterance ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech_tools.cli import main


def make_split(root: Path, ids: list[str], transcripts: bool = True) -> Path:
    for utt in ids:
        speaker, chapter, _ = utt.split("-")
        folder = root / speaker / chapter
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{utt}.flac").write_bytes(b"fLaC")
        if transcripts:
            with open(folder / f"{speaker}-{chapter}.trans.txt", "a", encoding="utf-8") as f:
                f.write(f"{utt} WORDS OF {utt}\n")
    return root


IDS = [f"{s}-{c}-{u:04d}" for s, c in (("121", "121726"), ("1089", "134686"), ("237", "126133")) for u in range(90)]


def test_default_is_first_200_in_string_order(tmp_path, capsys):
    split = make_split(tmp_path / "test-clean", IDS)
    assert main(["fixed-slice", str(split)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 200
    assert out == sorted(IDS)[:200]
    assert out[0] == "1089-134686-0000" and out[90] == "121-121726-0000"  # strings: 1089 < 121


def test_count_and_tsv(tmp_path, capsys):
    split = make_split(tmp_path / "test-other", IDS)
    assert main(["fixed-slice", str(split), "-n", "3", "--tsv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"1089-134686-000{i}\t1089/134686/1089-134686-000{i}.flac\tWORDS OF 1089-134686-000{i}" for i in range(3)
    ]


def test_output_file(tmp_path):
    split = make_split(tmp_path / "s", IDS)
    assert main(["fixed-slice", str(split), "-n", "5", "-o", str(tmp_path / "ids.txt")]) == 0
    assert (tmp_path / "ids.txt").read_text().split() == sorted(IDS)[:5]


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (lambda p: make_split(p, IDS[:10]), ["-n", "11"], "only 10 utterances, 11 requested"),
        (lambda p: p.mkdir(), [], "no utterances"),
        (lambda p: make_split(p, IDS[:2], transcripts=False), ["--tsv", "-n", "2"], "no transcript line"),
        (lambda p: make_split(p, IDS[:2]), ["-n", "0"], "at least 1"),
    ],
)
def test_errors(tmp_path, capsys, setup, args, message):
    split = tmp_path / "split"
    setup(split)
    assert main(["fixed-slice", str(split), *args]) == 2
    assert message in capsys.readouterr().err


def test_misplaced_file_refused(tmp_path, capsys):
    split = make_split(tmp_path / "s", IDS[:2])
    (split / "121" / "121726" / "999-1-0001.flac").write_bytes(b"")
    assert main(["fixed-slice", str(split), "-n", "1"]) == 2
    assert "does not follow" in capsys.readouterr().err


def test_missing_directory(tmp_path, capsys):
    assert main(["fixed-slice", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fixed-slice", "--help"])
    assert exc.value.code == 0
    assert "default 200" in capsys.readouterr().out
