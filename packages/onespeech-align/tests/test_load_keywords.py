"""``load(directory, threads=4)`` as the spec writes it, for the aligner and the recognizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
from onespeech.kernels.precision import Precision
from onespeech.qwen3.recognizer import Qwen3Options, Qwen3Recognizer


def test_aligner_takes_the_spec_keywords(tiny_aligner_dir: Path) -> None:
    with Qwen3ForcedAligner.load(tiny_aligner_dir, threads=2) as aligner:
        assert aligner.options == Qwen3AlignerOptions(threads=2)
    with Qwen3ForcedAligner.load(tiny_aligner_dir, precision="fp32", threads=1, cancel=None) as aligner:
        assert aligner.options == Qwen3AlignerOptions(Precision.FLOAT32, 1)


def test_aligner_keywords_are_checked_as_options_are(tiny_aligner_dir: Path) -> None:
    with pytest.raises(ValueError, match="threads"):
        Qwen3ForcedAligner.load(tiny_aligner_dir, threads=0)


@pytest.mark.parametrize("load", [Qwen3ForcedAligner.load, Qwen3Recognizer.load])
def test_options_and_keywords_together_are_refused(tmp_path: Path, load) -> None:
    options = Qwen3AlignerOptions() if load == Qwen3ForcedAligner.load else Qwen3Options()
    # refused before anything is read: the directory does not even exist
    with pytest.raises(TypeError, match=r"give options= or the keywords threads=, not both"):
        load(tmp_path / "missing", options, threads=4)
    with pytest.raises(TypeError, match=r"options must be a Qwen3\w*Options or None, not int; give its fields "
                                        r"as keywords instead \(.*threads=\.\.\."):
        load(tmp_path / "missing", 4)

