"""Fixtures of the cross-package tests: ending tiny checkpoints, a local Hub, real clips.

The checkpoints are tiny seeded random ones whose greedy output ends
(``end_scale``) and whose aligner predicts slots inside short clips (``max_slot``);
see docs/checkpoints.md. ``served_models`` publishes them on a Hub served from
127.0.0.1 under catalog entries of their own, with a fresh model cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

ASR_ID, ALIGNER_ID = "Demo/Qwen3-ASR-tiny-ending", "Demo/Qwen3-ForcedAligner-tiny"
REVISION = "e" * 40
END_SCALE = 0.1  # end tokens win greedy decoding every few dozen steps on these clips
MAX_SLOT = 120  # aligner slots within 9.6 s


@dataclass(frozen=True)
class Checkpoints:
    asr: Path
    aligner: Path


@pytest.fixture(scope="session")
def checkpoints(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    from onespeech_tools.checkpoints import make_checkpoint

    root = tmp_path_factory.mktemp("checkpoints")
    asr = make_checkpoint(root / "asr", "tiny", seed=0, data_dir=shared_data, end_scale=END_SCALE)
    aligner = make_checkpoint(root / "aligner", "tiny", seed=0, kind="aligner", data_dir=shared_data,
                              max_slot=MAX_SLOT)
    return Checkpoints(asr, aligner)


@pytest.fixture(scope="session")
def runtime_dirs(checkpoints: Checkpoints, tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    """FP32 runtime directories of the checkpoints (converted once for the session)."""
    import shutil

    from onespeech.qwen3.runtime import load_model

    root = tmp_path_factory.mktemp("runtime")
    out = []
    for source in (checkpoints.asr, checkpoints.aligner):
        target = root / source.name
        shutil.copytree(source, target)
        load_model(target, "fp32").close()  # converts in place once
        out.append(target)
    return Checkpoints(*out)


@pytest.fixture(scope="session")
def vad_path(shared_data: Path) -> Path:
    return shared_data / "models" / "silero_vad.onnx"


@dataclass
class ServedModels:
    catalog: Path
    home: Path
    server: Any
    asr_id: str = ASR_ID
    aligner_id: str = ALIGNER_ID


@pytest.fixture
def served_models(
    checkpoints: Checkpoints, hub_server_cls: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Both checkpoints on a local Hub under catalog ids, with an empty model cache."""
    from onespeech_tools.catalogs import write_entry

    catalog, home = tmp_path / "catalog", tmp_path / "home"
    write_entry(catalog, checkpoints.asr, ASR_ID, REVISION, "asr")
    write_entry(catalog, checkpoints.aligner, ALIGNER_ID, REVISION, "aligner")
    server = hub_server_cls().start()
    server.add_repo(ASR_ID, REVISION, checkpoints.asr)
    server.add_repo(ALIGNER_ID, REVISION, checkpoints.aligner)
    monkeypatch.setenv("ONESPEECH_HOME", str(home))
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield ServedModels(catalog, home, server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def clips(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real clips: flac (44.1 kHz stereo), mp3, 44.1 kHz stereo wav, and a joined clip over 30 s."""
    from onespeech.features import load_audio

    audio = shared_data / "audio"
    root = tmp_path_factory.mktemp("clips")
    jfk, rate = soundfile.read(audio / "jfk.flac", dtype="float32", always_2d=True)
    wav44 = root / "jfk_44k_stereo.wav"
    soundfile.write(wav44, jfk, rate, subtype="PCM_16")
    pieces = []
    for name in ("picovoice_test.wav", "jfk.flac", "picovoice_test_de.wav",
                 "librispeech_test-clean_1995-1837-0001.wav", "jfk.flac", "picovoice_test.wav"):
        pieces += [load_audio(audio / name), np.zeros(3 * 16000, dtype=np.float32)]
    joined = root / "joined.flac"
    soundfile.write(joined, np.concatenate(pieces), 16000, subtype="PCM_24")
    return {
        "flac": audio / "jfk.flac",
        "mp3": audio / "multilingual_en_de.mp3",
        "wav44": wav44,
        "wav16": audio / "librispeech_test-clean_1995-1837-0001.wav",
        "joined": joined,
    }
