"""The speaker-encoder model kind (``speaker``) for the kernels' model lifecycle.

Importing this module registers the Resemblyzer converter (publisher ``pretrained.pt``,
read with the restricted checkpoint reader -> one runtime tensor file), the
publisher file it reads and the catalog files shipped in
``onespeech/speech/speakers/catalog/`` (the pinned Resemblyzer wheel).
"""

from __future__ import annotations

from pathlib import Path

from onespeech.kernels.registry import register_kind

__all__ = ["CATALOG_DIR", "CHECKPOINT", "convert_publisher", "publisher_files"]

#: Directory of the catalog entries this package ships (the Resemblyzer speaker encoder).
CATALOG_DIR = Path(__file__).with_name("catalog")
#: The publisher's checkpoint file the speaker runtime file is converted from.
CHECKPOINT = "pretrained.pt"


def convert_publisher(publisher_dir: Path, staging_dir: Path, precision: str, revision: str | None) -> None:
    """The registered converter: ``pretrained.pt`` -> its runtime tensor file (FP32 only)."""
    from onespeech.speech.speakers.convert import RUNTIME_NAME, convert_resemblyzer

    if precision != "fp32":
        raise ValueError(f"the speaker encoder runs in fp32 only, not {precision!r}")
    convert_resemblyzer(Path(publisher_dir) / CHECKPOINT, Path(staging_dir) / RUNTIME_NAME)


def publisher_files(directory: Path) -> list[str]:
    """``["pretrained.pt"]`` when ``directory`` holds it, else []."""
    return [CHECKPOINT] if (Path(directory) / CHECKPOINT).is_file() else []


register_kind(
    "speaker", convert_publisher, sources=publisher_files, catalog_dir=CATALOG_DIR, describe_sources=CHECKPOINT
)
