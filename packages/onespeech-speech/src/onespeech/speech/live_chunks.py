"""Closed recognition chunks from a live 16 kHz stream (the VAD half of a streaming session).

``LiveChunker.feed`` takes blocks of any size, runs the streaming Silero VAD and its
segmenter, and returns every chunk that closed with the block: one chunk per VAD
speech region, so a final never waits for later speech. A region longer than the
30 s recognition bound is cut before it ends, at the point the offline planner
(``onespeech.features.plan_chunks``) would choose for it: the quietest 100 ms in the
last 5 s before the bound, once at least 1 s past the bound has been heard.

Memory stays bounded: the chunker keeps audio only from the earliest sample a
future chunk can start at (a region in progress is at most 31 s before it is cut).
All boundaries are sample indices on the stream's 16 kHz clock, the same clock the
offline path uses, so the same chunk recognized offline gives the same result.
"""

from __future__ import annotations

import numpy as np

from onespeech.features import Chunk, ChunkPlanner, SileroVad, SpeechRegion, VadOptions
from onespeech.features.pcm import MAX_CHUNK_SAMPLES, MIN_SAMPLES_EXCLUSIVE, SAMPLE_RATE
from onespeech.speech.chunk import ClosedChunk
from onespeech.speech.region_stream import SpeechRegionStream

_MIN_REST = SAMPLE_RATE  # a forced cut leaves at least 1 s (as the chunk planner does)


class LiveChunker:
    """Streaming VAD chunking, one chunk per speech region: ``feed`` blocks, then ``finish``.

    Same interface as ``onespeech.speech.chunk.AudioChunker`` (which reproduces the file
    path's grouping of regions into 30 s chunks, so a chunk may wait for later speech).

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
        self._buffer = self._regions.buffer
        self._max = max_samples
        self._emitted_until = 0  # no later chunk starts before this (a long region was cut here)
        self._finished = False

    @property
    def n_samples(self) -> int:
        """Samples fed so far."""
        return self._buffer.end

    @property
    def buffered_samples(self) -> int:
        """Samples held for chunks that have not closed yet (bounded by about 31 s)."""
        return self._buffer.end - self._buffer.start

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
        self._trim()
        return chunks

    def finish(self) -> list[ClosedChunk]:
        """End of the stream: return the chunks still open."""
        if self._finished:
            return []
        self._finished = True
        chunks = self._close(self._regions.finish())
        self._regions.release(self.n_samples)
        return chunks

    # -- internals ------------------------------------------------------------------

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
        self._emitted_until = chunk.end
        if chunk.n_samples <= MIN_SAMPLES_EXCLUSIVE:
            return []  # too short to make features; no speech to speak of (as the file path drops it)
        return [ClosedChunk(chunk, self._buffer.view(chunk.start, chunk.end).copy())]

    def _trim(self) -> None:
        self._regions.release(max(self._emitted_until, self._regions.horizon))

