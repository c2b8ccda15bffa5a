"""The chunks of one file decoded together, their segments given back in chunk order.

A chunk is encoded and its prompt built when it closes (its PCM is then no longer
needed: the timing pass replays the audio); the prompt joins a decode batch
(``onespeech.qwen3.BatchDecoder``) once the batch's bounds allow it, stepping the
batch until a live chunk leaves when they do not. So at most ``decode_batch``
chunks' key/value caches (within ``decode_memory_mb``) are alive, whatever the
file's length, and a chunk's text is the same bits as recognizing it alone.

The batch may be shared (the server's workers share one): whoever waits for its
own chunks steps the batch for everyone in it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from onespeech.kernels.cancel import Cancel
from onespeech.qwen3 import BatchDecoder, DecodeSequence, Qwen3Recognizer
from onespeech.speech.chunk import chunk_segment
from onespeech.speech.document import Segment

__all__ = ["ChunkBatch"]


@dataclass
class _Chunk:
    start: int
    end: int
    sequence: DecodeSequence


class ChunkBatch:
    """One file's chunks in a decode batch, in order.

    Parameters
    ----------
    recognizer : Qwen3Recognizer
        Encodes and prefills each chunk (its decoder runs the prefill).
    batch : BatchDecoder
        Runs the decode steps; a batch of this recognizer's, or one shared with others
        over the same weights.
    language : str | None
        Forced language of every chunk, or None.
    cancel : threading.Event-like, callable or None
        Checked in each chunk's encoder and prefill and before every step.
    """

    def __init__(self, recognizer: Qwen3Recognizer, batch: BatchDecoder, language: str | None,
                 cancel: Cancel) -> None:
        self.recognizer = recognizer
        self.batch = batch
        self.language = language
        self.cancel = cancel
        self._pending: deque[_Chunk] = deque()  # joined, in chunk order

    def add(self, pcm: np.ndarray, start: int, end: int) -> list[tuple[int, Segment]]:
        """Encode one closed chunk and join it to the batch; the chunks now complete, in order.

        Each as (its first sample, its segment).

        ``pcm`` holds samples ``start..end`` of the source's 16 kHz clock. Steps the
        batch while the chunk does not fit, so earlier chunks may complete here.
        """
        if pcm.shape != (end - start,):
            raise ValueError(f"pcm has shape {pcm.shape}; expected ({end - start},) for samples {start}..{end}")
        rec = self.recognizer
        embeds = rec.chunk_prompt(pcm, self.language, self.cancel)
        while True:
            seq = self.batch.join(embeds, rec.options.max_new_tokens, key=start, owner=self, cancel=self.cancel,
                                  decoder=rec.decoder)
            if seq is not None:
                break
            self._step()
        self._pending.append(_Chunk(start, end, seq))
        return self._ready()

    def finish(self) -> list[tuple[int, Segment]]:
        """Step until every chunk is done; the remaining (first sample, segment) pairs, in order."""
        done: list[tuple[int, Segment]] = []
        while self._pending:
            done.extend(self._ready())
            if self._pending:
                self._step()
        return done

    def close(self) -> None:
        """Take this file's unfinished chunks out of the batch (after an error or a chunk limit)."""
        self.batch.discard(c.sequence for c in self._pending)
        self._pending.clear()

    def _step(self) -> None:
        self.batch.step()
        for chunk in self._pending:
            if chunk.sequence.error is not None:
                raise chunk.sequence.error

    def _ready(self) -> list[tuple[int, Segment]]:
        # the chunk-order prefix that is done: a later chunk waits for the earlier ones
        done = []
        while self._pending and self._pending[0].sequence.done:
            chunk = self._pending.popleft()
            result = self.recognizer.chunk_result(chunk.sequence.result(), self.language)
            done.append((chunk.start, chunk_segment(result, chunk.start, chunk.end)))
        return done
