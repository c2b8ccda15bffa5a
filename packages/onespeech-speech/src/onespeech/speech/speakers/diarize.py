"""``diarize(source, speakers="auto")``: who speaks when, as ordered non-overlapping turns.

The stage (see :mod:`.segmentation` for the pieces):

1. Silero VAD regions ended at pauses of 0.25 s; partial embeddings of each region
   with the GE2E encoder; regions cut where the speaker changes without a pause.
2. Pieces of at least ``min_cluster_seconds`` are clustered by average linkage on
   cosine distance, into ``speakers`` clusters, or (``"auto"``) into the count
   :func:`.clustering.estimate_count` finds (single-speaker tests, then the best
   silhouette after dissolving clusters with under 10 % of the speech; settings tuned
   on the tuning clips of ``tools/eval_diarization.py``, docs/speakers.md).
   Shorter pieces carry too little voice to vote.
3. Each region is labelled along time with the most similar speaker centroid (the
   partials covering each 0.1 s, runs under 1 s absorbed), which also cuts regions
   the first split missed.
4. Turns (:mod:`.turns`): consecutive spans of one speaker separated by pauses of at
   most ``max_pause`` seconds (default 2.0) become one turn, pauses included; a
   change of speaker or a longer pause ends it. Labels are ``SPEAKER_00``,
   ``SPEAKER_01``, ... in order of first appearance.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from onespeech.features import SileroVad, SpeechRegion, SpeechRegionStream, VadOptions, load_vad
from onespeech.features.pcm import validate_pcm
from onespeech.features.speaker_encoder import SpeakerEncoder
from onespeech.kernels.cancel import Cancel, check_cancel, raise_if_cancelled
from onespeech.speech.progress import Progress, ProgressCallback, check_progress, progress_reporter
from onespeech.speech.speakers.clustering import (
    centroids,
    estimate_count,
    given_count,
    nearest_centroid,
    relabel_by_first_appearance,
)
from onespeech.speech.speakers.segmentation import (
    SAMPLE_RATE,
    PartialEmbedder,
    Piece,
    RegionPartials,
    resegment_region,
    split_region,
)
from onespeech.speech.speakers.turns import DEFAULT_MAX_PAUSE, Turn, build_turns, check_max_pause

__all__ = ["MAX_SPEAKERS", "DiarizationOptions", "Diarizer", "Turn", "diarize", "speaker_label"]

MAX_SPEAKERS = 64  #: a given count above this is a mistake, not a meeting
_ARRAY_BLOCK = 1 << 16  # samples per block when the audio is one array (views, no copies)
# pieces clustered at most: average linkage holds n x n distances (and scans them n times), which
# for the ~2400 pieces of two hours of talk was 46 MB a matrix; beyond this many, as many pieces
# evenly spread over the file are clustered (2 MB) and every piece is then labelled against their
# centroids
MAX_CLUSTERED = 512


@dataclass(frozen=True)
class DiarizationOptions:
    """Settings of the speaker stage (defaults are the evaluated ones)."""

    min_silence_ms: int = 250  # a pause this long ends a VAD region
    partial_rate: float = 2.0  # partial embeddings per second inside regions
    split_similarity: float = 0.6  # cut a region where before/after similarity falls below this
    min_cluster_seconds: float = 1.5  # shorter pieces are assigned, not clustered
    single_distance: float = 0.21  # automatic count: one speaker below this last-merge distance
    single_similarity: float = 0.81  # automatic count: one speaker when every piece is this close to the centroid
    max_pause: float = DEFAULT_MAX_PAUSE  # seconds: a longer pause ends a speaker's turn
    min_speaker_fraction: float = 0.1  # automatic count: clusters with less speech are dissolved
    resegment: bool = True  # relabel regions along time against the speaker centroids
    max_speakers: int = 10  # automatic count: the most speakers considered

    def __post_init__(self) -> None:
        if not 0 < self.partial_rate <= 10:
            raise ValueError(f"partial_rate={self.partial_rate} must be in (0, 10] partials per second")
        if not -1 <= self.split_similarity <= 1:
            raise ValueError(
                f"split_similarity={self.split_similarity} must be a cosine similarity in [-1, 1]"
            )
        if not -1 <= self.single_similarity <= 1:
            raise ValueError(
                f"single_similarity={self.single_similarity} must be a cosine similarity in [-1, 1]"
            )
        if not 0 <= self.single_distance <= 2:
            raise ValueError(f"single_distance={self.single_distance} must be a cosine distance in [0, 2]")
        if not 0 <= self.min_speaker_fraction < 1:
            raise ValueError(f"min_speaker_fraction={self.min_speaker_fraction} must be in [0, 1)")
        if not isinstance(self.max_speakers, int) or self.max_speakers < 1:
            raise ValueError(f"max_speakers={self.max_speakers!r} must be an integer >= 1")
        if self.min_cluster_seconds < 0:
            raise ValueError(f"min_cluster_seconds={self.min_cluster_seconds} must be >= 0 seconds")
        check_max_pause(self.max_pause)


def speaker_label(index: int) -> str:
    """``SPEAKER_00``, ``SPEAKER_01``, ..."""
    return f"SPEAKER_{index:02d}"


def check_speakers(speakers: object) -> int | None:
    """``None`` for ``"auto"``, else the speaker count (an int in 1..``MAX_SPEAKERS``)."""
    if speakers == "auto":
        return None
    if isinstance(speakers, int) and not isinstance(speakers, bool) and 1 <= speakers <= MAX_SPEAKERS:
        return speakers
    raise ValueError(f"speakers={speakers!r} must be 'auto' or a number of speakers from 1 to {MAX_SPEAKERS}")


class Diarizer:
    """The speaker stage over 16 kHz PCM, with a loaded encoder and VAD.

    The audio is streamed: each VAD region is embedded once it closes and only its
    partial embeddings are kept (see :class:`.segmentation.PartialEmbedder`), so what
    is held grows with the number of regions (about 2 kB per second of speech), not
    with the audio. A region's samples are held until it closes: continuous speech
    without a pause of ``min_silence_ms`` is held whole (64 kB per second).
    """

    def __init__(
        self, encoder: SpeakerEncoder, vad: SileroVad, options: DiarizationOptions | None = None
    ) -> None:
        self.encoder = encoder
        self.vad = vad
        self.options = options or DiarizationOptions()

    @property
    def vad_options(self) -> VadOptions:
        return VadOptions(min_silence_duration_ms=self.options.min_silence_ms)

    def regions(self, pcm: np.ndarray) -> list[tuple[int, int]]:
        """The speech regions (samples) of the whole audio, as the stage finds them."""
        found = self.vad.speech_regions(pcm, self.vad_options)
        return [(r.start, r.end) for r in found if r.end > r.start]

    def embed(
        self,
        audio: np.ndarray | Iterable[np.ndarray],
        *,
        progress: Progress = False,
        cancel: Cancel = None,
    ) -> list[RegionPartials]:
        """The partial embeddings of every speech region of ``audio``.

        ``audio`` is 16 kHz mono float32 PCM, whole or as consecutive blocks of any
        size (an iterable of arrays); both give the same result. ``progress`` is the
        protocol of ``transcribe`` (default False: none): a callable gets
        ``("speakers", done_seconds, total_seconds)`` after each block (for blocks, whose
        total is unknown, total = done); None draws a bar on a terminal. ``cancel`` is
        checked before each block and each encoder batch.
        """
        report = progress_reporter(progress, "diarize")  # checks progress before any work
        try:
            return self._embed(audio, report, cancel)
        finally:
            report.close()

    def _embed(self, audio: np.ndarray | Iterable[np.ndarray], report: ProgressCallback,
               cancel: Cancel) -> list[RegionPartials]:
        total = None
        blocks: Iterable[np.ndarray] = audio
        if isinstance(audio, np.ndarray):
            pcm = validate_pcm(audio)
            total = pcm.shape[0]
            blocks = (pcm[k : k + _ARRAY_BLOCK] for k in range(0, total, _ARRAY_BLOCK))
        stream = SpeechRegionStream(self.vad, self.vad_options)
        embedder = PartialEmbedder(self.encoder, partial_rate=self.options.partial_rate, cancel=cancel)

        def take(regions: list[SpeechRegion]) -> None:
            for region in regions:
                if region.end > region.start:
                    embedder.add(region.start, region.end, stream.samples(region))
            stream.release(stream.horizon)  # the closed regions' samples are embedded or queued as mels

        for block in blocks:
            raise_if_cancelled(cancel, "speaker attribution")
            take(stream.feed(block))
            done = stream.n_samples / SAMPLE_RATE
            report("speakers", done, done if total is None else total / SAMPLE_RATE)
        take(stream.finish())
        return embedder.finish()

    def __call__(
        self,
        audio: np.ndarray | Iterable[np.ndarray],
        speakers: int | str = "auto",
        *,
        progress: Progress = False,
        cancel: Cancel = None,
    ) -> list[Turn]:
        """The turns of ``audio`` (PCM or its blocks, as :meth:`embed` takes; ``progress`` as there)."""
        count = check_speakers(speakers)
        check_cancel(cancel)
        return turns_from_partials(self.embed(audio, progress=progress, cancel=cancel), count, self.options)


    @classmethod
    def load(cls, options: DiarizationOptions | None = None, *, threads: int | None = None) -> Diarizer:
        """The default encoder (catalog ``resemblyzer``, fetched on first use) and Silero VAD."""
        from onespeech.features.speaker_model import load_speaker_encoder

        return cls(load_speaker_encoder(threads=threads), load_vad(), options)

    def source(
        self,
        source: str | os.PathLike[str] | np.ndarray,
        speakers: int | str = "auto",
        *,
        progress: Progress = False,
        cancel: Cancel = None,
    ) -> list[Turn]:
        """The turns of an audio file (decoded in blocks, as transcribe replays a file) or of PCM."""
        if isinstance(source, np.ndarray):
            return self(source, speakers, progress=progress, cancel=cancel)
        from onespeech.features import AudioFileSource

        with AudioFileSource(source) as audio:
            return self(audio.blocks(), speakers, progress=progress, cancel=cancel)


def cluster_pieces(pieces: list[Piece], count: int | None, options: DiarizationOptions) -> np.ndarray:
    """Unit centroids (K, 256) of the speakers found among ``pieces``."""
    durations = np.array([p.seconds for p in pieces])
    core = np.nonzero(durations >= options.min_cluster_seconds)[0]
    if core.size < max(2, count or 0):
        core = np.arange(len(pieces))
    if core.size > MAX_CLUSTERED:  # evenly spread over the file, so each speaker keeps its share of them
        core = core[np.linspace(0, core.size - 1, MAX_CLUSTERED).round().astype(np.int64)]
    e, w = np.stack([pieces[i].embedding for i in core]), durations[core]
    if count is not None:
        labels = given_count(e, w, count)
    else:
        labels = estimate_count(
            e, w, max_speakers=options.max_speakers, single_distance=options.single_distance,
            single_similarity=options.single_similarity,
            min_fraction=options.min_speaker_fraction,
        )  # fmt: skip
    return centroids(e, w, labels, np.arange(labels.max() + 1))


def turns_from_partials(
    regions: list[RegionPartials], count: int | None, options: DiarizationOptions
) -> list[Turn]:
    """Split, cluster, resegment and join: the turns of regions whose partials are embedded."""
    pieces = [p for region in regions for p in split_region(region, options.split_similarity)]
    if not pieces:
        return []
    speaker_centroids = cluster_pieces(pieces, count, options)
    if options.resegment:
        spans = [s for region in regions for s in resegment_region(region, speaker_centroids)]
    else:
        spans = [
            (p.start, p.end, int(k))
            for p, k in zip(
                pieces,
                nearest_centroid(np.stack([p.embedding for p in pieces]), speaker_centroids),
                strict=True,
            )
        ]
    order = relabel_by_first_appearance(np.array([k for _, _, k in spans]))
    labelled = [(start, end, label) for (start, end, _), label in zip(spans, order.tolist(), strict=True)]
    turns = build_turns(labelled, options.max_pause * SAMPLE_RATE)
    return [Turn(s / SAMPLE_RATE, e / SAMPLE_RATE, speaker_label(k)) for s, e, k in turns]


def diarize(
    source: str | os.PathLike[str] | np.ndarray,
    speakers: int | str = "auto",
    *,
    max_pause: float = DEFAULT_MAX_PAUSE,
    threads: int | None = None,
    progress: Progress = None,
    cancel: Cancel = None,
) -> list[Turn]:
    """Who speaks when in ``source``: ordered, non-overlapping turns in file seconds.

    Parameters
    ----------
    source
        An audio file (any format the audio source reads) or 16 kHz mono float32 PCM.
    speakers
        ``"auto"`` (find the count) or the number of speakers (1..``MAX_SPEAKERS``).
    max_pause
        Seconds: a speaker's pauses up to this long belong to their turn; a longer
        pause ends it (as a change of speaker does).
    threads
        Threads for the encoder (default: the runtime's default).
    progress
        The progress protocol of ``transcribe``: None, a tqdm bar on stderr when it is
        a terminal; False, none; a callable gets ``("speakers", done_seconds,
        total_seconds)`` after each block of audio (``total`` is the audio's length
        where it is known ahead, else the seconds done so far).
    cancel
        A ``threading.Event``-like or callable signal, checked between blocks of audio and
        encoder batches; raises ``OperationCancelledError``.

    Raises
    ------
    ValueError
        ``speakers`` is neither "auto" nor an int in 1..``MAX_SPEAKERS``, or
        ``max_pause`` is not a finite number >= 0.
    TypeError
        ``progress`` is neither None, False nor callable.
    """
    count = check_speakers(speakers)
    options = DiarizationOptions(max_pause=check_max_pause(max_pause))
    check_progress(progress)
    check_cancel(cancel)
    diarizer = Diarizer.load(options, threads=threads)
    raise_if_cancelled(cancel, "speaker attribution")
    return diarizer.source(source, count if count is not None else "auto", progress=progress, cancel=cancel)
