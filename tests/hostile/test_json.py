"""Deeply nested JSON in every model file the library parses: a typed error naming the file.

``json.loads`` recurses once per nesting level, so 100 KB of ``[[[[...`` escaped as a
bare ``RecursionError``. Each reader now raises its package's typed error, naming the
file and where the nesting went too deep (onespeech.kernels.jsonfile; the tokenizer,
stdlib-only, keeps its own copy). Inputs are small and parse fails fast: these run in
the test process.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from onespeech.kernels import JsonNestingError, ModelIntegrityError, TensorFileError
from onespeech.kernels.catalog import load_entry
from onespeech.kernels.errors import CatalogError
from onespeech.kernels.jsonfile import loads_json
from onespeech.kernels.lock import read_holder
from onespeech.kernels.store import read_manifest
from onespeech.kernels.tensorfile import MAGIC, read_tensor_file
from onespeech.qwen3.config import load_config
from onespeech.qwen3.errors import ConfigError, SafetensorsError
from onespeech.qwen3.safetensors import open_checkpoint, read_header
from onespeech.tokenizer import Qwen3Tokenizer, TokenizerFileError

LEVELS = 100_000
DEEP = '{"a": "[[[ inside a string: not nesting", "b": ' + "[" * LEVELS + "]" * LEVELS + "}"
NESTED = "nested .* levels deep"


def test_loads_json_reports_where_the_nesting_went_too_deep() -> None:
    with pytest.raises(JsonNestingError) as caught:
        loads_json(DEEP)
    error = caught.value
    assert isinstance(error, json.JSONDecodeError)
    # the first "[" after the string is at the depth the report starts counting from
    first = DEEP.index("[", DEEP.index('"b"'))
    assert error.pos == first + error.depth - 2  # depth counts the enclosing object
    assert loads_json(b'{"ok": [1, {"x": null}]}') == {"ok": [1, {"x": None}]}


def test_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(DEEP)
    with pytest.raises(ConfigError, match=f"config.json.*{NESTED}"):
        load_config(tmp_path)


def test_generation_config_json(tmp_path: Path, shared_data: Path) -> None:
    shutil.copyfile(shared_data / "configs" / "Qwen3-ASR-0.6B" / "config.json", tmp_path / "config.json")
    (tmp_path / "generation_config.json").write_text(DEEP)
    with pytest.raises(ConfigError, match=f"generation_config.json.*{NESTED}"):
        load_config(tmp_path)


@pytest.mark.parametrize("name", ["vocab.json", "tokenizer_config.json"])
def test_tokenizer_files(tmp_path: Path, tokenizer_dir: Path, name: str) -> None:
    for item in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir / item, tmp_path / item)
    (tmp_path / name).write_text(DEEP)
    with pytest.raises(TokenizerFileError, match=f"{name}.*{NESTED}"):
        Qwen3Tokenizer.load(tmp_path)


def test_runtime_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(DEEP)
    with pytest.raises(ModelIntegrityError, match=f"manifest.json.*{NESTED}"):
        read_manifest(tmp_path)


def test_catalog_entry(tmp_path: Path) -> None:
    (tmp_path / "entry.json").write_text(DEEP)
    with pytest.raises(CatalogError, match=f"entry.json.*{NESTED}"):
        load_entry(tmp_path / "entry.json")


def test_safetensors_header(tmp_path: Path) -> None:
    header = DEEP.encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(SafetensorsError, match=f"model.safetensors.*{NESTED}"):
        read_header(tmp_path / "model.safetensors")


def test_safetensors_index(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(DEEP)
    with pytest.raises(SafetensorsError, match=f"model.safetensors.index.json.*{NESTED}"):
        open_checkpoint(tmp_path)


def test_runtime_tensor_file_index(tmp_path: Path) -> None:
    index = DEEP.encode()
    path = tmp_path / "fp32-layers.ostensor"
    path.write_bytes(struct.pack("<8sIIQ", MAGIC, 1, 0, len(index)) + index)
    with pytest.raises(TensorFileError, match=f"fp32-layers.ostensor.*{NESTED}"):
        read_tensor_file(path)


def test_lock_file_reads_as_no_holder(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_text(DEEP)
    assert read_holder(tmp_path / ".lock") is None


def test_recognizer_load_names_the_config(asr_copy: Path) -> None:
    from onespeech.qwen3 import Qwen3Recognizer

    (asr_copy / "config.json").write_text(DEEP)
    with pytest.raises(ConfigError, match=f"config.json.*{NESTED}"):
        Qwen3Recognizer.load(asr_copy)


def test_document_json(tmp_path: Path) -> None:
    from onespeech.speech.document import Document, DocumentFormatError

    with pytest.raises(DocumentFormatError, match=NESTED):
        Document.from_json(DEEP)


def test_batch_record_reads_as_absent(tmp_path: Path) -> None:
    from onespeech.speech.batch.records import read_record

    (tmp_path / "a.record.json").write_text(DEEP)
    assert read_record(tmp_path / "a.record.json") is None  # the input is redone
