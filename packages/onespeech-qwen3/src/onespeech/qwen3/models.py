"""The Qwen3 model kinds (``asr``, ``aligner``) for the kernels' model lifecycle.

Importing this module registers, for both kinds, the converter
(:func:`onespeech.qwen3.convert.convert`), the publisher files a conversion reads
and the catalog files shipped in ``onespeech/qwen3/catalog/``. The package imports
it, and names it under the ``onespeech.models`` entry points, so that
``onespeech.kernels.resolve.resolve("Qwen/Qwen3-ASR-0.6B")`` works from any layer.
"""

from __future__ import annotations

from pathlib import Path

from onespeech.kernels.registry import register_kind
from onespeech.qwen3.convert import CONVERTER_ID

__all__ = ["CATALOG_DIR", "KINDS", "convert_publisher", "publisher_files"]

#: Directory of the catalog entries this package ships (Qwen3-ASR and Qwen3-ForcedAligner).
CATALOG_DIR = Path(__file__).with_name("catalog")
#: The model kinds this package registers and converts.
KINDS = ("asr", "aligner")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def convert_publisher(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None) -> None:
    """The registered converter: :func:`onespeech.qwen3.convert.convert` (imported on use)."""
    from onespeech.qwen3.convert import convert

    convert(publisher_dir, staging_dir, precision, revision=revision)


def publisher_files(directory: Path) -> list[str]:
    """The files of ``directory`` a conversion reads (weights, index, config, tokenizer), or []
    when it holds no publisher checkpoint (no config.json or no weights)."""
    from onespeech.qwen3.convert import COPIED_FILES
    from onespeech.qwen3.safetensors import weight_files

    directory = Path(directory)
    if not (directory / "config.json").is_file() or not any((directory / n).is_file() for n in _WEIGHTS):
        return []
    names = {path.name for path in weight_files(directory)}
    names.update(n for n in (*_WEIGHTS, *COPIED_FILES) if (directory / n).is_file())
    return sorted(names)


for _kind in KINDS:
    register_kind(
        _kind, convert_publisher, sources=publisher_files, catalog_dir=CATALOG_DIR,
        describe_sources="config.json with model.safetensors or model.safetensors.index.json and its shards",
        converter_version=CONVERTER_ID,
    )  # fmt: skip
