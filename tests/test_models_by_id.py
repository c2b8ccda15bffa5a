"""The newcomer path: models by catalog id, fetched on first use from a (local) server.

Tiny publisher-layout checkpoints and a wheel holding the real Silero ONNX file are
served from 127.0.0.1 under test catalog entries (``ONESPEECH_CATALOG_DIR``); the
recognizer, the aligner and the default VAD fetch, verify, convert and install what
they need through the one install path, and a second load touches no network.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech.align import Qwen3ForcedAligner
from onespeech.features import load_audio
from onespeech.kernels.catalog import CATALOG_ENV
from onespeech.kernels.errors import ModelKindError
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.decoder import Generation
from onespeech_tools.catalogs import build_silero_wheel, hub_entry, wheel_entry, write_catalog_file
from onespeech_tools.checkpoints import make_checkpoint

ASR, ALIGNER, REV = "Demo/Qwen3-ASR-tiny", "Demo/Qwen3-ForcedAligner-tiny", "d" * 40


@pytest.fixture(scope="module")
def published(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("published")
    return {
        ASR: make_checkpoint(root / "asr", "tiny", seed=0, kind="asr", data_dir=shared_data),
        ALIGNER: make_checkpoint(root / "aligner", "tiny", seed=0, kind="aligner", data_dir=shared_data),
        "onnx": shared_data / "models" / "silero_vad.onnx",
    }


@pytest.fixture()
def hub(published, tmp_path: Path, hub_server_cls, monkeypatch: pytest.MonkeyPatch):
    server = hub_server_cls().start()
    catalog = tmp_path / "catalog"
    for model_id, kind in ((ASR, "asr"), (ALIGNER, "aligner")):
        server.add_repo(model_id, REV, published[model_id])
        write_catalog_file(catalog, hub_entry(model_id, REV, published[model_id], kind))
    wheel = build_silero_wheel(published["onnx"], tmp_path / "wheels")
    write_catalog_file(catalog, wheel_entry(wheel, server.add_file(f"packages/{wheel.name}", wheel), published["onnx"]))
    monkeypatch.setenv(CATALOG_ENV, str(catalog))
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "home"))
    for var in ("ONESPEECH_OFFLINE", "HF_HUB_OFFLINE", "ONESPEECH_VAD_MODEL"):
        monkeypatch.delenv(var, raising=False)
    yield server
    server.stop()


def test_aligner_loads_by_catalog_id(hub) -> None:
    with Qwen3ForcedAligner.load(ALIGNER) as aligner:
        result = aligner.align(np.zeros(16000, dtype=np.float32), "hello world", "en")
    assert [w.text for w in result.words] == ["hello", "world"]
    served = len(hub.requests)
    assert served > 0
    Qwen3ForcedAligner.load(ALIGNER).close()  # installed: no request
    assert len(hub.requests) == served


def test_each_class_refuses_the_other_kind_by_id(hub) -> None:
    with pytest.raises(ModelKindError, match="kind 'asr'"):
        Qwen3ForcedAligner.load(ASR)
    with pytest.raises(ModelKindError, match="kind 'aligner'"):
        Qwen3Recognizer.load(ALIGNER)
    assert hub.requests == []  # refused before fetching anything


def test_long_transcription_fetches_the_default_vad(hub, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pcm = load_audio(shared_data / "audio" / "multilingual_en_de.mp3")  # 59.9 s: needs the VAD
    with Qwen3Recognizer.load(ASR, Qwen3Options(max_new_tokens=8)) as rec:
        spans = []

        def generate(embeds, max_new, eos, cancel, **kw):  # random weights: the words mean nothing
            spans.append(embeds.shape[0])
            return Generation(rec.tokenizer.encode(f"part {len(spans)}"), True)

        monkeypatch.setattr(rec.decoder, "generate", generate)
        result = rec.transcribe(pcm, language="en")
    assert len(result.segments) == len(spans) >= 2
    assert any(r.path.endswith(".whl") for r in hub.requests)


def test_hf_token_goes_to_the_hub_only(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HF_TOKEN`` is for the Hub endpoint; the VAD wheel from the package host never carries it."""
    from onespeech.features.vad_model import default_vad_path
    from onespeech.kernels.resolve import resolve

    monkeypatch.setenv("HF_TOKEN", "hf_only_for_the_hub")
    resolve(ALIGNER, kind="aligner")
    default_vad_path()
    wheel = [r for r in hub.requests if r.path.endswith(".whl")]
    models = [r for r in hub.requests if "/resolve/" in r.path]
    assert wheel and all("Authorization" not in r.headers for r in wheel)
    assert models and all(r.headers.get("Authorization") == "Bearer hf_only_for_the_hub" for r in models)
