"""The catalog data files: schema, pins, and agreement with the real files in shared/data."""

from __future__ import annotations

import copy
import json

import pytest

from onespeech.kernels.catalog import entry_from_data, get_entry, load_catalog, validate_catalog_data
from onespeech.kernels.errors import CatalogError, UnknownModelError
from onespeech.kernels.registry import catalog_dirs
from onespeech.kernels.store import sha256_file

CATALOG_FILES = sorted(p for d in catalog_dirs() for p in d.glob("*.json"))
KNOWN = {
    "Qwen/Qwen3-ASR-0.6B": "5eb144179a02acc5e5ba31e748d22b0cf3e303b0",
    "Qwen/Qwen3-ASR-1.7B": "7278e1e70fe206f11671096ffdd38061171dd6e5",
    "Qwen/Qwen3-ForcedAligner-0.6B": "c7cbfc2048c462b0d63a45797104fc9db3ad62b7",
}
# published totals of every file at the pinned revisions (SOURCES.md section 4)
TOTAL_BYTES = {
    "Qwen/Qwen3-ASR-0.6B": 1_880_618_159,
    "Qwen/Qwen3-ASR-1.7B": 4_703_112_789,
    "Qwen/Qwen3-ForcedAligner-0.6B": 1_840_070_940,
}
SHARED_CONFIG_DIR = {
    "Qwen/Qwen3-ASR-0.6B": "Qwen3-ASR-0.6B",
    "Qwen/Qwen3-ASR-1.7B": "Qwen3-ASR-1.7B",
    "Qwen/Qwen3-ForcedAligner-0.6B": "Qwen3-ForcedAligner-0.6B",
}


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.name)
def test_every_catalog_file_follows_the_schema(path):
    validate_catalog_data(json.loads(path.read_text(encoding="utf-8")), str(path))


def test_catalog_lists_the_models():
    entries = load_catalog()
    assert set(entries) == {*KNOWN, "silero-vad", "resemblyzer"}
    for model_id, revision in KNOWN.items():
        assert entries[model_id].repo == model_id and entries[model_id].revision == revision
        assert entries[model_id].license == "Apache-2.0"
    vad = entries["silero-vad"]
    assert vad.kind == "vad" and vad.default and vad.license == "MIT"
    assert vad.file("silero_vad.onnx").pin.sha256.startswith("1a153a22")


@pytest.mark.parametrize("model_id", sorted(TOTAL_BYTES))
def test_publisher_pins_add_up_to_published_total(model_id):
    entry = get_entry(model_id)
    assert sum(f.size for f in entry.files) == TOTAL_BYTES[model_id]
    assert entry.unknown_pins() == [
        f"runtime {p}: unreproducible ({entry.runtime[p].reason})" for p in ("fp32", "bf16")
    ]


@pytest.mark.parametrize("model_id", sorted(SHARED_CONFIG_DIR))
def test_small_file_pins_match_the_real_files(model_id, shared_data):
    entry = get_entry(model_id)
    folder = shared_data / "configs" / SHARED_CONFIG_DIR[model_id]
    checked = 0
    for f in entry.files:
        real = folder / f.name if (folder / f.name).exists() else shared_data / "tokenizer" / f.name
        if real.exists():
            assert sha256_file(real) == f.pin, f.name
            checked += 1
    assert checked == 7  # config, generation, preprocessor, tokenizer_config, chat_template, vocab, merges


def test_vad_pin_matches_real_model(shared_data):
    entry = get_entry("silero-vad")
    assert sha256_file(shared_data / "models" / "silero_vad.onnx") == entry.file("silero_vad.onnx").pin
    assert sha256_file(shared_data / "models" / "LICENSE.silero-vad.txt") == entry.file("LICENSE").pin


def test_vad_runtime_pin_is_reproduced_by_our_converter(shared_data, tmp_path):
    """The one runtime pin reproducible here (the real model is available): converting
    the real silero_vad.onnx must give exactly the pinned bytes. If the tensor-file or
    VAD runtime format changes on purpose, re-pin the file in silero-vad.json."""
    from onespeech.features import silero_convert
    pins = get_entry("silero-vad").runtime["fp32"]
    assert pins.status == "pinned"
    ((name, pin),) = pins.files.items()
    onnx = shared_data / "models" / "silero_vad.onnx"
    assert name == f"silero_vad-{sha256_file(onnx).sha256[:16]}.tensors"  # the name onespeech.features caches
    out = silero_convert.convert_silero_onnx(onnx, tmp_path / name)
    assert sha256_file(out) == pin


def test_required_files_are_what_conversion_needs():
    entry = get_entry("Qwen/Qwen3-ASR-1.7B")
    assert set(entry.required_pins()) == {
        "config.json", "generation_config.json", "preprocessor_config.json", "chat_template.json",
        "tokenizer_config.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    }  # fmt: skip
    assert not entry.file("README.md").required


def test_unknown_model_lists_known_ids():
    with pytest.raises(UnknownModelError, match="Qwen/Qwen3-ASR-0.6B"):
        get_entry("Qwen/Qwen3-ASR-9B")


@pytest.fixture()
def data():
    return json.loads(get_entry("Qwen/Qwen3-ASR-0.6B").path.read_text())


def mutate(data, fn):
    d = copy.deepcopy(data)
    fn(d)
    return d


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(schema="v0"), "schema"),
        (lambda d: d.pop("license"), "missing key"),
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.update(kind="tts"), "kind"),
        (lambda d: d["source"].update(revision="main"), "40-hex commit"),
        (lambda d: d["source"].update(repo="../x"), "owner/name"),
        (lambda d: d["source"]["files"]["config.json"].update(sha256="76d3ae46…a478c"), "64 lowercase hex"),
        (lambda d: d["source"]["files"]["config.json"].update(size="6193"), "byte count"),
        (lambda d: d["source"]["files"]["config.json"].update(sha256=None), "unknown_reason"),
        (lambda d: d["source"]["files"].update({"../evil": d["source"]["files"]["config.json"]}), "'..'"),
        (lambda d: d["runtime"]["fp32"].update(status="pinned"), "converter"),
        (lambda d: d["runtime"]["fp32"].update(files={}), "must be null"),
        (lambda d: d["runtime"].update(int8=d["runtime"]["fp32"]), "precision"),
        (lambda d: d["runtime"]["bf16"].pop("reason"), "reason"),
        (lambda d: d.update(id="Qwen/Other"), "equal source.repo"),
    ],
)
def test_schema_rejects(data, change, match):
    with pytest.raises(CatalogError, match=match):
        validate_catalog_data(mutate(data, change), "test")


def test_unknown_pin_is_allowed_with_reason_and_reported(data):
    def forget(d):
        d["source"]["files"]["README.md"].update(sha256=None, unknown_reason="digest not published")

    entry = entry_from_data(mutate(data, forget))
    assert entry.file("README.md").pin is None
    assert "README.md: digest not published" in entry.unknown_pins()
    assert "README.md" not in entry.required_pins()  # optional: does not block fetching


def test_unknown_required_pin_blocks_fetch(data):
    def forget(d):
        d["source"]["files"]["config.json"].update(sha256=None, unknown_reason="only a prefix is known")

    with pytest.raises(CatalogError, match="config.json has no full pin"):
        entry_from_data(mutate(data, forget)).required_pins()


def test_pinned_runtime_is_parsed(data):
    def pin(d):
        d["runtime"]["fp32"] = {
            "status": "pinned", "converter": "onespeech.qwen3.convert 1",
            "files": {"manifest.json": {"size": 10, "sha256": "a" * 64}},
        }  # fmt: skip

    entry = entry_from_data(mutate(data, pin))
    assert entry.runtime["fp32"].files["manifest.json"].size == 10
    assert entry.unknown_pins() == [f"runtime bf16: unreproducible ({entry.runtime['bf16'].reason})"]


def test_duplicate_ids_refused(tmp_path, data):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(data))
    with pytest.raises(CatalogError, match="also defined"):
        load_catalog(tmp_path)
