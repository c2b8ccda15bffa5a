"""Every entry point that transcribes starts from the same defaults: ``TranscribeOptions()``.

Each entry point is called with nothing but its source; the options it would run with are
caught where it builds them (no model is loaded) and compared with the defaults.
Before, a live session and ``onespeech stream`` turned the aligner off by default
while ``transcribe`` aligned.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from onespeech.speech import Transcriber, transcribe
from onespeech.speech.batch import transcribe_corpus
from onespeech.speech.cli import build_parser, options_from_args
from onespeech.speech.options import TranscribeOptions
from onespeech.speech.streaming import LiveSession, stream_file


class _Built(Exception):
    """Raised once the options are built: the entry point goes no further."""

    def __init__(self, options: TranscribeOptions) -> None:
        super().__init__("options built")
        self.options = options


@pytest.fixture
def caught(monkeypatch: pytest.MonkeyPatch) -> None:
    build = TranscribeOptions.build.__func__  # type: ignore[attr-defined]

    def stop(cls: type[TranscribeOptions], options: TranscribeOptions | None = None, **changes: Any) -> None:
        raise _Built(build(cls, options, **changes))

    monkeypatch.setattr(TranscribeOptions, "build", classmethod(stop))


def _corpus(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    transcribe_corpus([tmp_path / "in"], tmp_path / "out", progress=False)


ENTRY_POINTS: dict[str, Callable[[Path], object]] = {
    "transcribe": lambda tmp: transcribe(tmp / "a.wav", progress=False),
    "Transcriber": lambda tmp: Transcriber(),
    "LiveSession": lambda tmp: LiveSession(),
    "stream_file": lambda tmp: next(stream_file(tmp / "a.wav")),
    "transcribe_corpus": _corpus,
    "ServerConfig": lambda tmp: _server_config(),
}


def _server_config() -> None:
    from onespeech.speech.server.config import ServerConfig

    ServerConfig()


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_builds_the_default_options(caught: None, tmp_path: Path, name: str) -> None:
    with pytest.raises(_Built) as built:
        ENTRY_POINTS[name](tmp_path)
    assert built.value.options == TranscribeOptions()
    assert built.value.options.aligner is not None  # words are timed everywhere


@pytest.mark.parametrize("command", ["transcribe", "batch", "stream", "serve"])
def test_each_command_starts_from_the_default_options(command: str) -> None:
    args = build_parser().parse_args([command] if command == "serve" else [command, "x"])
    assert options_from_args(args) == TranscribeOptions()
