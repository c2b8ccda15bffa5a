import io

import pytest

from onespeech.speech import progress as progress_module
from onespeech.speech.progress import progress_reporter


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_callable_gets_every_event() -> None:
    events = []
    reporter = progress_reporter(lambda *e: events.append(e))
    reporter("decode", 1.0, 10.0)
    reporter("align", 10.0, 10.0)
    reporter.close()
    assert events == [("decode", 1.0, 10.0), ("align", 10.0, 10.0)]


def test_bars_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module.sys, "stderr", io.StringIO())
    quiet = progress_reporter(None, "a.wav")
    quiet("decode", 1.0, 2.0)
    assert progress_module.sys.stderr.getvalue() == ""
    terminal = _Terminal()
    monkeypatch.setattr(progress_module.sys, "stderr", terminal)
    bars = progress_reporter(None, "a.wav")
    bars("recognize", 1.5, 3.0)
    bars.close()
    assert "a.wav recognize" in terminal.getvalue()
    silent = progress_reporter(False)
    silent("decode", 1.0, 2.0)
    assert "decode" not in terminal.getvalue()


def test_bad_progress_is_refused() -> None:
    with pytest.raises(TypeError, match="progress="):
        progress_reporter("yes")  # type: ignore[arg-type]
