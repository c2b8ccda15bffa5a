"""The VAD model kind (``vad``) for the kernels' model lifecycle.

Importing this module registers the Silero VAD converter (publisher
``silero_vad.onnx`` -> one runtime tensor file ``silero_vad-<sha256[:16]>.tensors``),
the publisher file it reads and the catalog files shipped in
``onespeech/features/catalog/`` (the pinned silero-vad wheel).
"""

from __future__ import annotations

from pathlib import Path

from onespeech.kernels.registry import register_kind

__all__ = ["CATALOG_DIR", "ONNX_NAME", "convert_publisher", "publisher_files", "runtime_name"]

#: Directory of the catalog entries this package ships (the Silero VAD).
CATALOG_DIR = Path(__file__).with_name("catalog")
#: The publisher's ONNX file the VAD runtime file is converted from.
ONNX_NAME = "silero_vad.onnx"


def runtime_name(onnx_sha256: str) -> str:
    """The runtime file converted from an ONNX file with this SHA-256."""
    return f"silero_vad-{onnx_sha256[:16]}.tensors"


def convert_publisher(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None) -> None:
    """The registered converter: ``silero_vad.onnx`` -> its runtime tensor file (FP32 only)."""
    from onespeech.features.silero_convert import convert_silero_onnx, sha256_of

    if precision != "fp32":
        raise ValueError(f"the Silero VAD runs in fp32 only, not {precision!r}")
    onnx = Path(publisher_dir) / ONNX_NAME
    convert_silero_onnx(onnx, Path(staging_dir) / runtime_name(sha256_of(onnx)))


def publisher_files(directory: Path) -> list[str]:
    """``["silero_vad.onnx"]`` when ``directory`` holds it, else []."""
    return [ONNX_NAME] if (Path(directory) / ONNX_NAME).is_file() else []


register_kind(
    "vad", convert_publisher, sources=publisher_files, catalog_dir=CATALOG_DIR, describe_sources=ONNX_NAME
)
