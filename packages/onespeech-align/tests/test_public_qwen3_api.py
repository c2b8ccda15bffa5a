"""The aligner builds on onespeech.qwen3's exported names only, never on its internals."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import onespeech.align
import onespeech.qwen3
from onespeech.align import TimingDispatcher, default_dispatcher
from onespeech.qwen3 import Transcript

SOURCE = Path(onespeech.align.__file__).parent


def _qwen3_imports() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, module, names) of every import of onespeech.qwen3 in the aligner's sources."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("onespeech.qwen3"):
                found.append((path.name, node.lineno, node.module or "", [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(path.name, node.lineno, a.name, []) for a in node.names if a.name.startswith("onespeech.qwen3")]
    return found


def test_align_imports_only_exported_qwen3_names() -> None:
    imports = _qwen3_imports()
    assert imports, "the aligner is expected to build on onespeech.qwen3"
    exported = set(onespeech.qwen3.__all__)
    for file, line, module, names in imports:
        assert module == "onespeech.qwen3", f"{file}:{line} imports the qwen3 module {module}; use the package's names"
        for name in names:
            assert not name.startswith("_") and name in exported, f"{file}:{line} imports {name}, not in qwen3 __all__"


def test_every_exported_qwen3_name_is_documented() -> None:
    for name in onespeech.qwen3.__all__:
        assert getattr(onespeech.qwen3, name).__doc__, name


def test_align_needs_no_type_ignore() -> None:
    # the decoder once got a look-alike of its KV cache behind one
    for path in sorted(SOURCE.rglob("*.py")):
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert "type: ignore" not in text, f"{path.name}:{number}: {text.strip()}"


def test_align_words_are_align_words(tiny_aligner, speech) -> None:
    text = "the apostle Paul, 2 times."
    assert tiny_aligner.align_words(speech, text, "en") == tiny_aligner.align(speech, text, "en").words


def test_time_text_is_time_of_a_transcript_without_words(tiny_aligner_dir, speech) -> None:
    dispatcher = default_dispatcher(tiny_aligner_dir)
    try:
        text = "the apostle Paul"
        by_text = dispatcher.time_text(speech, text, "en")
        by_transcript = dispatcher.time(speech, Transcript(text, "en"), "en")
        assert by_text.stage == by_transcript.stage == "qwen3-forced-aligner" and by_text.reason is None
        assert by_text.words == by_transcript.transcript.words and len(by_text.words) == 3
    finally:
        dispatcher.close()


def test_time_text_without_a_stage_says_why_and_loads_nothing() -> None:
    def never() -> str:
        raise AssertionError("no model is loaded for a language without a stage")

    dispatcher = default_dispatcher(never)
    pcm = np.zeros(16000, np.float32)
    for language, why in (("nl", "'nl'"), (None, "no language")):
        timing = dispatcher.time_text(pcm, "hallo", language)
        assert timing.words == () and timing.stage is None and why in (timing.reason or "")
    assert isinstance(dispatcher, TimingDispatcher)
