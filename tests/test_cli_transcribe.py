"""``onespeech transcribe`` and ``onespeech models`` on the tiny checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onespeech.speech import Document
from onespeech.speech.cli import main
from onespeech.speech.writers import FORMATS


def test_transcribe_writes_every_format_and_goes_on_after_a_bad_file(  # type: ignore[no-untyped-def]
    runtime_dirs, clips, vad_path, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    bad = tmp_path / "not-audio.wav"
    bad.write_text("this is not audio")
    out = tmp_path / "out"
    code = main(["transcribe", str(bad), str(clips["flac"]), "-m", str(runtime_dirs.asr), "--aligner",
                 str(runtime_dirs.aligner), "-l", "en", "-f", "all", "-o", str(out), "--threads", "1",
                 "--max-new-tokens", "256"])
    assert code == 1
    err = capsys.readouterr().err
    assert f"{bad}: UnreadableAudioError" in err
    assert "RTF" in err and "jfk.flac: 11.0 s of audio" in err
    assert sorted(p.name for p in out.iterdir()) == sorted(f"jfk.{f}" for f in FORMATS)
    document = Document.from_json((out / "jfk.json").read_text(encoding="utf-8"))
    assert document.language == "en" and document.segments
    segment = document.segments[0]
    assert segment.speaker is not None  # speakers are attributed by default
    txt = (out / "jfk.txt").read_text(encoding="utf-8").split()
    assert txt == [f"[{segment.speaker}]", *segment.text.split()]


def test_transcribe_all_good_exits_0_and_quiet_is_quiet(runtime_dirs, clips, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["transcribe", str(clips["wav16"]), "-m", str(runtime_dirs.asr), "--aligner", "none", "-l", "en",
                 "-f", "srt,tsv", "-o", str(tmp_path), "-q", "--max-new-tokens", "256"])
    assert code == 0
    assert capsys.readouterr().err == ""
    stem = Path(clips["wav16"]).stem
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stem}.srt", f"{stem}.tsv"]


@pytest.mark.parametrize("argv", [["-f", "docx"], ["--max-new-tokens", "0"], ["--precision", "fp8"]])
def test_transcribe_usage_errors_exit_2(argv, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as info:
        code = main(["transcribe", str(tmp_path / "a.wav"), *argv])
        raise SystemExit(code)
    assert info.value.code == 2


def test_models_list_fetch_verify_remove(served_models, capsys) -> None:  # type: ignore[no-untyped-def]
    catalog = ["models", "--catalog-dir", str(served_models.catalog)]
    assert main([*catalog, "list"]) == 0
    listing = capsys.readouterr().out
    assert served_models.asr_id in listing and "OneSpeech cache: no" in listing
    assert main([*catalog, "fetch", served_models.asr_id]) == 0
    assert "runtime" in capsys.readouterr().out
    assert main([*catalog, "list"]) == 0
    assert "fp32 runtime installed" in capsys.readouterr().out
    # an install an earlier converter wrote is listed as such (the next use converts it again)
    from onespeech.kernels.store import read_manifest, write_manifest

    record = next(served_models.home.rglob("install.fp32.json"))
    old = read_manifest(record.parent, name=record.name)
    write_manifest(record.parent, list(old.files), name=record.name, metadata={**old.metadata, "converter": "older"})
    assert main([*catalog, "list"]) == 0
    assert "fp32 runtime installed by an earlier converter (converted again on next use)" in capsys.readouterr().out
    assert main([*catalog, "verify", served_models.asr_id]) == 0
    assert "files verified" in capsys.readouterr().out
    # a damaged cached file is found and named
    publisher = next(served_models.home.rglob("publisher"))
    (publisher / "config.json").write_text(json.dumps({"damaged": True}))
    assert main([*catalog, "verify", served_models.asr_id]) == 1
    assert "config.json" in capsys.readouterr().err
    assert main([*catalog, "remove", served_models.asr_id]) == 0
    capsys.readouterr()
    assert main([*catalog, "list"]) == 0
    assert "OneSpeech cache: no" in capsys.readouterr().out
    assert main([*catalog, "fetch", "Nobody/Unknown"]) == 1
    assert "not in the catalog" in capsys.readouterr().err
