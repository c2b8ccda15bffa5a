"""Streamed 16 kHz audio -> recognition chunks: the one chunker of every recognition path.

One streaming chunker (:class:`StreamChunker`) and one planner (:class:`ChunkPlanner`)
serve every path; the file path is a stream that ends at EOF. Blocks of any size go
in (``feed``), ``finish`` ends the stream, and each :class:`ClosedChunk` (its sample
range and a copy of its samples) comes out as soon as no later audio can change it.
The streaming VAD's regions go to the planner as they close; a region still in
progress is cut where the planner would cut it once that cut is certain (it runs
1 s past the bound), so memory stays bounded during unbroken speech. Audio is held in
one :class:`SampleBuffer` from the earliest sample a later chunk can need, and chunks
of 200 samples or fewer are dropped (too short to make features).

Two settings, two presets:

- :class:`AudioChunker` (files; the spec's chunking): audio of at most 30 s is one
  chunk ``(0, n)`` and needs no VAD; longer audio is planned with regions grouped
  into chunks of at most 30 s (``group=True``). Its chunks are exactly
  ``plan_chunks`` over the whole audio, for any split into blocks.
- :class:`LiveChunker` (live sessions, the server): every region, or piece of a long
  region, is a chunk at once (``group=False``), so a final never waits for later
  speech. Its chunks are exactly ``plan_chunks(..., group=False)`` over the whole
  audio, for any split into blocks.

Both plans have the same pieces, so for audio longer than 30 s each file chunk is a
run of consecutive live chunks (the same boundaries, fewer of them). They cannot be
the same chunks: grouping regions, or keeping audio of up to 30 s whole, needs audio
a live caller does not have yet, and the spec keeps live finals one-pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onespeech.features.chunks import Chunk, ChunkPlanner
from onespeech.features.pcm import MAX_CHUNK_SAMPLES, MIN_SAMPLES_EXCLUSIVE, StreamedPcm
from onespeech.features.sample_buffer import SampleBuffer
from onespeech.features.segments import SpeechRegion, SpeechSegmenter, VadOptions
from onespeech.features.vad import SileroVad, VadStream

__all__ = ["AudioChunker", "ClosedChunk", "LiveChunker", "StreamChunker"]


@dataclass(frozen=True)
class ClosedChunk:
    """A chunk's sample range and its samples (a copy owned by the caller)."""

    chunk: Chunk
    pcm: np.ndarray


class StreamChunker:
    """Feed 16 kHz mono blocks, get recognition chunks as they close; ``finish`` at the end.

    Parameters
    ----------
    vad : SileroVad or callable returning one
        Scores the audio (a fresh stream per chunker; the model is shared read-only).
        A callable is called only once the audio is longer than ``whole_up_to``.
    options : VadOptions, optional
        Segmentation settings (the file path's timing replay must use the same).
    max_samples : int
        Chunk bound (480000, 30 s; at least 2 s).
    group : bool
        Group consecutive regions into chunks of at most ``max_samples`` (the file
        plan), or make each region a chunk at once (the live plan).
    whole_up_to : int
        Audio of at most this many samples is one chunk ``(0, n)`` and needs no VAD
        (the file path: ``max_samples``; live: 0, the VAD from the first sample).
    """

    def __init__(
        self,
        vad: SileroVad | Callable[[], SileroVad],
        options: VadOptions | None = None,
        max_samples: int = MAX_CHUNK_SAMPLES,
        *,
        group: bool,
        whole_up_to: int,
    ) -> None:
        self._planner = ChunkPlanner(max_samples, group)  # refuses a bound under 2 s first
        self._vad = vad
        self._stream: VadStream | None = None  # started once the audio exceeds whole_up_to
        self._segmenter = SpeechSegmenter(options)
        self._buffer = SampleBuffer()
        self._whole_up_to = whole_up_to
        # values are checked per block, the length (> 200 samples) by a file's finish: the
        # last block of an ordinary file may hold only a few samples
        self._checks = StreamedPcm()
        self._finished = False

    @property
    def n_samples(self) -> int:
        """Samples fed so far."""
        return self._buffer.end

    @property
    def buffered_samples(self) -> int:
        """Samples held for chunks that have not closed yet."""
        return self._buffer.end - self._buffer.start

    def feed(self, block: np.ndarray) -> list[ClosedChunk]:
        """Add the next samples (any number, including 0); return the chunks they close (source order).

        Raises
        ------
        PcmShapeError, NonFiniteSampleError, PcmPowerOverflowError
            The block is not 1-D float PCM, holds a NaN or infinity (named by its index
            in the audio), or the audio's power so far overflows float32.
        ValueError
            ``finish`` was already called.
        """
        if self._finished:
            raise ValueError("this stream is finished (finish() was called); feed more audio to a new chunker")
        pcm = self._checks.block(block)
        self._buffer.append(pcm)
        if self._stream is None:
            if self.n_samples <= self._whole_up_to:
                return []  # may still be one chunk: no VAD needed yet, keep everything
            vad = self._vad() if callable(self._vad) else self._vad
            self._stream = vad.stream()
            pcm = self._buffer.held()  # everything so far (nothing was dropped yet)
        return self._plan(self._segmenter.feed(self._stream.feed(pcm)), final=False)

    def finish(self) -> list[ClosedChunk]:
        """End of the audio: the remaining chunks (a second call returns none).

        Audio of at most ``whole_up_to`` samples is one chunk ``(0, n)`` (empty audio: none).
        """
        if self._finished:
            return []
        self._finished = True
        if self._stream is None:
            return self._closed([Chunk(0, self.n_samples)]) if self.n_samples else []
        regions = self._segmenter.feed(self._stream.finish()) + self._segmenter.finish(self.n_samples)
        return self._plan(regions, final=True)

    def _plan(self, regions: list[SpeechRegion], final: bool) -> list[ClosedChunk]:
        pcm, offset = self._buffer.held(), self._buffer.start
        chunks: list[Chunk] = []
        for region in regions:
            chunks += self._planner.add(region, pcm, offset)
        if final:
            chunks += self._planner.finish()
        else:
            open_region = self._segmenter.open_region()
            if open_region is not None:
                start, min_end = open_region
                chunks += self._planner.cut_open(start, min(min_end, self.n_samples), pcm, offset)
        out = self._closed(chunks)
        self._buffer.drop_before(self.n_samples if final else self._keep_from())
        return out

    def _keep_from(self) -> int:
        """The earliest sample a later chunk can need: the open chunk's, or the regions still to come."""
        cut = self._planner.cut_until
        regions_from = self._segmenter.horizon if cut is None else max(cut, self._segmenter.horizon)
        open_start = self._planner.open_start
        return regions_from if open_start is None else min(open_start, regions_from)

    def _closed(self, chunks: list[Chunk]) -> list[ClosedChunk]:
        # a chunk of 200 samples or fewer cannot make features; it holds no speech to speak of
        return [ClosedChunk(c, self._buffer.view(c.start, c.end).copy())
                for c in chunks if c.n_samples > MIN_SAMPLES_EXCLUSIVE]


class AudioChunker(StreamChunker):
    """The file path's chunker: audio of at most ``max_samples`` is one chunk, longer audio the file plan.

    ``Qwen3Recognizer.transcribe``, file transcription, its timing replay,
    ``stream_file`` and ``LiveSession(chunking="file")`` use it. ``vad`` may be a
    callable, called only when the audio turns out longer than one chunk.
    """

    def __init__(
        self,
        vad: SileroVad | Callable[[], SileroVad],
        options: VadOptions | None = None,
        max_samples: int = MAX_CHUNK_SAMPLES,
    ) -> None:
        super().__init__(vad, options, max_samples, group=True, whole_up_to=max_samples)

    def finish(self) -> list[ClosedChunk]:
        """End of the audio: the remaining chunks.

        Raises
        ------
        PcmTooShortError
            The audio holds 1 to 200 samples.
        """
        if not self._finished:
            self._checks.finish()
        return super().finish()


class LiveChunker(StreamChunker):
    """The live chunker: each VAD speech region (or piece of a long one) is a chunk as soon as it closes.

    Memory stays bounded: a region in progress is cut once it runs 1 s past the bound,
    so at most about 31 s are held. All boundaries are sample indices on the stream's
    16 kHz clock, the file path's clock, so the same chunk recognized offline gives the
    same result. Live sessions (``chunking="region"``) and the WebSocket server use it.
    """

    def __init__(self, vad: SileroVad, options: VadOptions | None = None, max_samples: int = MAX_CHUNK_SAMPLES):
        super().__init__(vad, options, max_samples, group=False, whole_up_to=0)
