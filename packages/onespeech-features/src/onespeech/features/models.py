"""The model kinds of this package (``vad``, ``speaker``) for the kernels' model lifecycle.

Importing this module registers, for each kind, its converter, the publisher file it
reads and the catalog files shipped in ``onespeech/features/catalog/``:

- ``vad``: Silero VAD (publisher ``silero_vad.onnx`` -> one runtime tensor file
  ``silero_vad-<sha256[:16]>.tensors``; the pinned silero-vad wheel);
- ``speaker``: Resemblyzer's GE2E encoder (publisher ``pretrained.pt``, read with the
  restricted checkpoint reader -> one runtime tensor file; the pinned Resemblyzer wheel).
"""

from __future__ import annotations

from pathlib import Path

from onespeech.kernels.registry import register_kind

__all__ = [
    "CATALOG_DIR",
    "CHECKPOINT",
    "ONNX_NAME",
    "convert_publisher",
    "convert_speaker_publisher",
    "publisher_files",
    "runtime_name",
    "speaker_publisher_files",
]

#: Directory of the catalog entries this package ships (the Silero VAD, the Resemblyzer speaker encoder).
CATALOG_DIR = Path(__file__).with_name("catalog")
#: The publisher's ONNX file the VAD runtime file is converted from.
ONNX_NAME = "silero_vad.onnx"
#: The publisher's checkpoint file the speaker runtime file is converted from.
CHECKPOINT = "pretrained.pt"


def runtime_name(onnx_sha256: str) -> str:
    """The runtime file converted from an ONNX file with this SHA-256."""
    return f"silero_vad-{onnx_sha256[:16]}.tensors"


def convert_publisher(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None) -> None:
    """The registered ``vad`` converter: ``silero_vad.onnx`` -> its runtime tensor file (FP32 only)."""
    from onespeech.features.silero_convert import convert_silero_onnx, sha256_of

    if precision != "fp32":
        raise ValueError(f"the Silero VAD runs in fp32 only, not {precision!r}")
    onnx = Path(publisher_dir) / ONNX_NAME
    convert_silero_onnx(onnx, Path(staging_dir) / runtime_name(sha256_of(onnx)))


def publisher_files(directory: Path) -> list[str]:
    """``["silero_vad.onnx"]`` when ``directory`` holds it, else []."""
    return [ONNX_NAME] if (Path(directory) / ONNX_NAME).is_file() else []


def convert_speaker_publisher(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None) -> None:
    """The registered ``speaker`` converter: ``pretrained.pt`` -> its runtime tensor file (FP32 only)."""
    from onespeech.features.resemblyzer_convert import RUNTIME_NAME, convert_resemblyzer

    if precision != "fp32":
        raise ValueError(f"the speaker encoder runs in fp32 only, not {precision!r}")
    convert_resemblyzer(Path(publisher_dir) / CHECKPOINT, Path(staging_dir) / RUNTIME_NAME)


def speaker_publisher_files(directory: Path) -> list[str]:
    """``["pretrained.pt"]`` when ``directory`` holds it, else []."""
    return [CHECKPOINT] if (Path(directory) / CHECKPOINT).is_file() else []


register_kind(
    "vad", convert_publisher, sources=publisher_files, catalog_dir=CATALOG_DIR, describe_sources=ONNX_NAME
)
register_kind(
    "speaker", convert_speaker_publisher, sources=speaker_publisher_files, catalog_dir=CATALOG_DIR,
    describe_sources=CHECKPOINT,
)  # fmt: skip
