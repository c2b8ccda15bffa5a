"""Per-stage wall time of a run of the library, measured from outside it.

The library has no timing code and needs none: `StageTimes` wraps, for the duration
of a ``with`` block, the few methods that each stage of ``transcribe`` goes through
(the same functions under any caller), and books each call's own time (its time
minus the wrapped calls inside it) to that stage:

- ``encoder``: ``AudioEncoder.forward`` of the recognizer;
- ``prefill``: ``Qwen3Decoder.forward`` of more than one position, and the output
  head right after it (the first token);
- ``decode``: ``Qwen3Decoder.forward`` of one position, ``Qwen3Decoder.step_batch``
  (batched decoding) and every other output-head call;
- ``aligner``: the forced aligner's public calls, with everything inside them
  (its own encoder and decoder pass included);
- ``speakers``: the speaker stage (``Diarizer``) without the VAD it runs;
- ``vad``: Silero VAD, wherever it runs (the chunk planner, the timing replay, the
  speaker stage);
- ``mel``: the recognizer's log-mel features;
- ``load``: loading the recognizer, the aligner, the speaker encoder and the VAD.

Whatever is left of the total (reading and resampling the file, the tokenizer,
prompt building, Python between the stages) is the caller's "other". Tokens are
counted too: ``prefills`` (one per chunk) and ``tokens`` (the first token of each
prefill plus one per decoded row), so a run can show that every chunk decoded its
budget.
"""

from __future__ import annotations

import importlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STAGES = ("load", "vad", "mel", "encoder", "prefill", "decode", "aligner", "speakers")
_ASR_STAGES = frozenset({"encoder", "prefill", "decode", "mel"})


class StageTimes:
    """Seconds per stage (exclusive), filled while :meth:`installed` is active."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [label, seconds spent in wrapped calls inside it]
        self._after_prefill = False

    def _timed(self, label: str, call: Callable[[], Any]) -> Any:
        if label in _ASR_STAGES and any(frame[0] == "aligner" for frame in self._stack):
            return call()  # the aligner's own encoder and decoder passes are the aligner's time
        frame: list[Any] = [label, 0.0]
        self._stack.append(frame)
        start = time.perf_counter()
        try:
            return call()
        finally:
            elapsed = time.perf_counter() - start
            self._stack.pop()
            self.seconds[label] += elapsed - frame[1]
            if self._stack:
                self._stack[-1][1] += elapsed

    def _wrap(self, label: str | Callable[..., str], method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            name = label(*args, **kwargs) if callable(label) else label
            return self._timed(name, lambda: method(*args, **kwargs))

        return wrapped

    def _forward_label(self, decoder: Any, embeds: Any, *args: Any, **kwargs: Any) -> str:
        n = int(embeds.shape[0])
        self._after_prefill = n > 1
        # the aligner's passes are not tokens; a row inside step_batch (its per-row fallback,
        # without compiled kernels) was counted by step_batch already
        if not any(frame[0] in ("aligner", "decode") for frame in self._stack):
            self.counts["prefills" if n > 1 else "decode_rows"] += 1
        return "prefill" if n > 1 else "decode"

    def _head_label(self, *args: Any, **kwargs: Any) -> str:
        label = "prefill" if self._after_prefill else "decode"
        self._after_prefill = False
        return label

    def _step_batch_label(self, decoder: Any, tokens: Any, *args: Any, **kwargs: Any) -> str:
        self._after_prefill = False
        self.counts["decode_rows"] += len(tokens)
        self.counts["batch_steps"] += 1
        return "decode"

    def _targets(self) -> list[tuple[str, str, str, str | Callable[..., str]]]:
        """(module, class or "" for a module function, attribute, stage) to wrap, where present."""
        qwen3 = "onespeech.qwen3"
        return [
            (f"{qwen3}.encoder", "AudioEncoder", "forward", "encoder"),
            (f"{qwen3}.decoder", "Qwen3Decoder", "forward", self._forward_label),
            (f"{qwen3}.decoder", "Qwen3Decoder", "step_batch", self._step_batch_label),
            (f"{qwen3}.decoder", "Qwen3Decoder", "logits", self._head_label),
            (f"{qwen3}.recognizer", "", "log_mel_spectrogram", "mel"),
            (f"{qwen3}.recognizer", "Qwen3Recognizer", "load", "load"),
            ("onespeech.align.aligner", "Qwen3ForcedAligner", "load", "load"),
            ("onespeech.align.aligner", "Qwen3ForcedAligner", "align", "aligner"),
            ("onespeech.align.aligner", "Qwen3ForcedAligner", "align_words", "aligner"),
            ("onespeech.align.aligner", "Qwen3ForcedAligner", "align_transcript", "aligner"),
            ("onespeech.align.aligner", "Qwen3ForcedAligner", "timestamp_logits", "aligner"),
            ("onespeech.speech.speakers.diarize", "Diarizer", "__call__", "speakers"),
            ("onespeech.speech.speakers.diarize", "Diarizer", "embed", "speakers"),
            ("onespeech.features.speaker_encoder", "SpeakerEncoder", "load", "load"),
            ("onespeech.features.vad", "SileroVad", "load", "load"),
            ("onespeech.features.vad", "SileroVad", "speech_probabilities", "vad"),
            ("onespeech.features.vad", "VadStream", "feed", "vad"),
            ("onespeech.features.vad", "VadStream", "finish", "vad"),
        ]

    @contextmanager
    def installed(self) -> Iterator[StageTimes]:
        """Wrap the stage methods for the block; the originals are restored on exit."""
        restore: list[tuple[Any, str, Any]] = []
        try:
            for module_name, class_name, attribute, label in self._targets():
                module = importlib.import_module(module_name)
                owner = getattr(module, class_name) if class_name else module
                raw = owner.__dict__.get(attribute) if class_name else getattr(owner, attribute, None)
                if raw is None:
                    continue  # not in this version of the library
                restore.append((owner, attribute, raw))
                if isinstance(raw, classmethod):
                    function = raw.__func__
                    setattr(owner, attribute, classmethod(self._wrap(label, function)))
                else:
                    setattr(owner, attribute, self._wrap(label, raw))
            yield self
        finally:
            for owner, attribute, raw in reversed(restore):
                setattr(owner, attribute, raw)

    @property
    def tokens(self) -> int:
        """Tokens chosen: the first of each prefill plus one per decoded row."""
        return self.counts["prefills"] + self.counts["decode_rows"]
