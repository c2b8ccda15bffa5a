"""Streamed 16 kHz audio -> recognition chunks: the one chunker of every recognition path.

Both chunkers take blocks of any size (``feed``), end with ``finish``, and hand out
each :class:`ClosedChunk` (its sample range and a copy of its samples) as soon as it
can no longer change. Both plan with the VAD-first planner (:class:`ChunkPlanner`,
chunks of at most 30 s cut inside silences the VAD found, an unbroken region over the
bound cut at its quietest point), hold audio in one :class:`SampleBuffer` from the
earliest sample a later chunk can need, and drop chunks of 200 samples or fewer (too
short to make features; no speech to speak of).

:class:`AudioChunker` is the file path (the spec's chunking): 30 s or less of audio is
one chunk ``(0, n)`` and needs no VAD; longer audio goes through the streaming VAD
and the planner, consecutive regions grouped into chunks of at most 30 s. Its chunks
are exactly those of ``plan_chunks`` over the whole audio, for any split into blocks;
``Qwen3Recognizer.transcribe``, file transcription and its timing replay all use it.

:class:`LiveChunker` is the live path: one chunk per VAD speech region, closed when
the region closes (a final never waits for later speech, so regions are not grouped
and short audio is not one chunk), and a region still running 1 s past the bound is
cut where the planner would cut it. The two differ on purpose: grouping regions, or
keeping audio of up to 30 s whole, means waiting for audio a live caller does not
have yet, so the live chunks cannot be the file chunks without delaying every final.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onespeech.features.chunks import Chunk, ChunkPlanner
from onespeech.features.pcm import MAX_CHUNK_SAMPLES, MIN_SAMPLES_EXCLUSIVE, SAMPLE_RATE, StreamedPcm
from onespeech.features.region_stream import SpeechRegionStream
from onespeech.features.sample_buffer import SampleBuffer
from onespeech.features.segments import SpeechRegion, SpeechSegmenter, VadOptions
from onespeech.features.vad import SileroVad, VadStream

__all__ = ["AudioChunker", "ClosedChunk", "LiveChunker"]

_MIN_REST = SAMPLE_RATE  # a forced cut leaves at least 1 s (as the chunk planner does)


@dataclass(frozen=True)
class ClosedChunk:
    """A chunk's sample range and its samples (a copy owned by the caller)."""

    chunk: Chunk
    pcm: np.ndarray


class _BufferedChunks:
    """What both chunkers share: the held samples and the hand-out of closed chunks."""

    def __init__(self, buffer: SampleBuffer) -> None:
        self._buffer = buffer

    @property
    def n_samples(self) -> int:
        """Samples fed so far."""
        return self._buffer.end

    @property
    def buffered_samples(self) -> int:
        """Samples held for chunks that have not closed yet."""
        return self._buffer.end - self._buffer.start

    def _closed(self, chunks: list[Chunk]) -> list[ClosedChunk]:
        # a chunk of 200 samples or fewer cannot make features; it holds no speech to speak of
        return [ClosedChunk(c, self._buffer.view(c.start, c.end).copy())
                for c in chunks if c.n_samples > MIN_SAMPLES_EXCLUSIVE]


class AudioChunker(_BufferedChunks):
    """Feed 16 kHz mono blocks of a file, get recognition chunks as they close.

    Parameters
    ----------
    vad : SileroVad or callable returning one
        Scores the audio (a fresh stream per chunker); a callable is called only
        when the audio turns out longer than one chunk.
    options : VadOptions, optional
        Segmentation settings (the timing replay must use the same).
    max_samples : int
        Chunk bound (480000, 30 s); audio of at most this length is one chunk.
    """

    def __init__(
        self,
        vad: SileroVad | Callable[[], SileroVad],
        options: VadOptions | None = None,
        max_samples: int = MAX_CHUNK_SAMPLES,
    ) -> None:
        super().__init__(SampleBuffer())
        self._vad = vad
        self._stream: VadStream | None = None  # started once the audio exceeds one chunk
        self._segmenter = SpeechSegmenter(options)
        self._planner = ChunkPlanner(max_samples)
        self._max = max_samples
        # values are checked per block, the length (> 200 samples) once on the whole audio:
        # the last block of an ordinary file may hold only a few samples
        self._checks = StreamedPcm()

    def feed(self, block: np.ndarray) -> list[ClosedChunk]:
        """Add the next samples (any number, including 0); return the chunks they close (source order).

        Raises
        ------
        PcmShapeError, NonFiniteSampleError, PcmPowerOverflowError
            The block is not 1-D float PCM, holds a NaN or infinity (named by its index in
            the audio), or the audio's power so far overflows float32.
        """
        pcm = self._checks.block(block)
        self._buffer.append(pcm)
        if self._stream is None:
            if self.n_samples <= self._max:
                return []  # may still be one chunk: no VAD needed yet, keep everything
            vad = self._vad() if callable(self._vad) else self._vad
            self._stream = vad.stream()
            pcm = self._buffer.held()  # everything so far (nothing was dropped yet)
        regions = self._segmenter.feed(self._stream.feed(pcm))
        return self._plan(regions, final=False)

    def finish(self) -> list[ClosedChunk]:
        """End of the audio: the remaining chunks.

        Audio of at most ``max_samples`` is one chunk ``(0, n)`` (empty audio: none).
        A VAD chunk of 200 samples or fewer holds no speech to speak of and is dropped.

        Raises
        ------
        PcmTooShortError
            The audio holds 1 to 200 samples.
        """
        self._checks.finish()
        if self._stream is None:
            return self._closed([Chunk(0, self.n_samples)]) if self.n_samples else []
        regions = self._segmenter.feed(self._stream.finish()) + self._segmenter.finish(self.n_samples)
        return self._plan(regions, final=True)

    def _plan(self, regions: list[SpeechRegion], final: bool) -> list[ClosedChunk]:
        pcm, offset = self._buffer.held(), self._buffer.start
        chunks = []
        for region in regions:
            chunks.extend(self._planner.add(region, pcm, offset))
        if final:
            chunks.extend(self._planner.finish())
        out = self._closed(chunks)
        self._buffer.drop_before(self._keep_from())
        return out

    def _keep_from(self) -> int:
        open_start = self._planner.open_start
        horizon = self._segmenter.horizon
        return horizon if open_start is None else min(open_start, horizon)


class LiveChunker(_BufferedChunks):
    """Streaming VAD chunking, one chunk per speech region: ``feed`` blocks, then ``finish``.

    Memory stays bounded: the chunker keeps audio only from the earliest sample a
    future chunk can start at (a region in progress is at most 31 s before it is cut).
    All boundaries are sample indices on the stream's 16 kHz clock, the same clock the
    file path uses, so the same chunk recognized offline gives the same result.

    Parameters
    ----------
    vad : SileroVad
        Shared read-only between chunkers; each chunker has its own stream state.
    options : VadOptions, optional
        Segmentation settings (the defaults are the file path's).
    max_samples : int
        Chunk bound (default 30 s).
    """

    def __init__(self, vad: SileroVad, options: VadOptions | None = None, max_samples: int = MAX_CHUNK_SAMPLES):
        if max_samples < 2 * _MIN_REST:
            raise ValueError(f"max_samples={max_samples} is below {2 * _MIN_REST} (2 s)")
        self._regions = SpeechRegionStream(vad, options)
        super().__init__(self._regions.buffer)
        self._max = max_samples
        self._emitted_until = 0  # no later chunk starts before this (a long region was cut here)
        self._finished = False

    def feed(self, pcm: np.ndarray) -> list[ClosedChunk]:
        """Consume the next 16 kHz mono float32 samples; return the chunks that closed.

        Raises
        ------
        PcmShapeError, NonFiniteSampleError
            The block is not 1-D float PCM, or holds a NaN or infinity.
        ValueError
            ``finish`` was already called.
        """
        if self._finished:
            raise ValueError("this stream is finished (finish() was called); feed more audio to a new chunker")
        chunks = self._close(self._regions.feed(pcm))  # validates the block
        chunks += self._cut_long_speech()
        self._regions.release(max(self._emitted_until, self._regions.horizon))
        return chunks

    def finish(self) -> list[ClosedChunk]:
        """End of the stream: return the chunks still open."""
        if self._finished:
            return []
        self._finished = True
        chunks = self._close(self._regions.finish())
        self._regions.release(self.n_samples)
        return chunks

    def _close(self, regions: list[SpeechRegion]) -> list[ClosedChunk]:
        chunks: list[ClosedChunk] = []
        for region in regions:
            start = max(region.start, self._emitted_until)  # the part before a forced cut is already out
            if region.end <= start:
                continue
            # one region, planned alone: a chunk of its own, or its quietest-point pieces if over the bound
            planner = ChunkPlanner(self._max)
            pieces = planner.add(SpeechRegion(start, region.end), self._buffer.held(), self._buffer.start)
            for piece in pieces + planner.finish():
                chunks += self._emit(piece)
        return chunks

    def _cut_long_speech(self) -> list[ClosedChunk]:
        """Cut a region in progress once it runs 1 s past the bound (its cut cannot change after that)."""
        chunks: list[ClosedChunk] = []
        while True:
            start = max(self._emitted_until, self._regions.horizon)
            if self.n_samples - start <= self._max + _MIN_REST:
                return chunks
            # plan the heard part as one region: its first cut is the planner's first cut for any
            # longer region with this start, since the quietest-point search ends at the bound
            planner = ChunkPlanner(self._max)
            first = planner.add(SpeechRegion(start, self.n_samples), self._buffer.held(), self._buffer.start)[0]
            chunks += self._emit(first)

    def _emit(self, chunk: Chunk) -> list[ClosedChunk]:
        self._emitted_until = chunk.end  # a dropped piece still moves the start of the next
        return self._closed([chunk])
