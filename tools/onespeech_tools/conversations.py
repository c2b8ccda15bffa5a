"""Conversations and monologues built from the real clips of shared/data, with references.

The shared clips are short single-speaker recordings (4-11 s; the two channels of
``stereo_diarization.wav`` are two speakers). Each is one speaker: distinct clips are
taken as distinct speakers (the picovoice clips are in different languages and most
likely different readers). ``multilingual_en_de.mp3`` is left out: it is not known
whether its English and German parts are one voice.

The speakers are split once, so that figures are measured on voices the settings were
not chosen on:

- ``TUNING``: the clips the speaker stage's thresholds were chosen and calibrated on;
- ``HELD_OUT``: the clips only the reported figures use.

Conversations: each speaker's clip, trimmed to its speech and levelled to -26 dBFS,
is looped; turns of 2-15 s are cut from it in turn, never the same speaker twice in a
row; between turns a pause (0.3-1.2 s), none, or an overlap (0.2-0.6 s). Monologues:
one speaker's looped clip cut into stretches of 2-15 s at random points, each at a
gain of -6..+6 dB, with pauses of 0.3-2.5 s between them, to 60-120 s in all. Real
long monologues and real conversations are not in the shared data, so both repeat
the same few seconds of each voice: same-speaker pieces are more alike than in a
real recording.

References follow the definition of a turn (:mod:`onespeech.speech.speakers.turns`):
the speech of each placed stretch (Silero VAD, default settings, on that speaker's
own track) with the speaker's pauses of at most ``max_pause`` between regions
inside the turn counted as the turn's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CLIPS",
    "CONVERSATIONS",
    "HELD_OUT",
    "MONOLOGUES",
    "TUNING",
    "Conversation",
    "ConversationSpec",
    "build_conversation",
    "build_monologue",
    "prepare_clip",
    "speakers_of",
]

SR = 16000
TARGET_DBFS = -26.0
MAX_PAUSE = 2.0  # the turn definition's default (onespeech.speech.speakers.turns.DEFAULT_MAX_PAUSE)

# speaker name -> clip file under shared/data/audio ("#k": channel k of a stereo file)
CLIPS = {
    "jfk": "jfk.flac",
    "libri1995": "librispeech_test-clean_1995-1837-0001.wav",
    "libri1272": "picovoice_test.wav",
    "aishell0724": "aishell1_BAC009S0724W0121.wav",
    "aishell0764": "aishell1_BAC009S0764W0121.wav",
    "de": "picovoice_test_de.wav",
    "es": "picovoice_test_es.wav",
    "fr": "picovoice_test_fr.wav",
    "it": "picovoice_test_it.wav",
    "ja": "picovoice_test_ja.wav",
    "ko": "picovoice_test_ko.wav",
    "pt": "picovoice_test_pt.wav",
    "stereo_left": "stereo_diarization.wav#0",
    "stereo_right": "stereo_diarization.wav#1",
}
TUNING = ("jfk", "libri1995", "aishell0724", "de", "fr", "ja", "stereo_left")
HELD_OUT = ("libri1272", "aishell0764", "es", "it", "ko", "pt", "stereo_right")


@dataclass(frozen=True)
class ConversationSpec:
    name: str
    speakers: tuple[str, ...]
    turns: int
    joins: tuple[str, ...]  # each junction is drawn from "pause", "none", "overlap"


CONVERSATIONS = {
    "tuning": [
        ConversationSpec("tune_two", ("jfk", "libri1995"), 10, ("pause",)),
        ConversationSpec("tune_three", ("aishell0724", "de", "fr"), 12, ("none",)),
        ConversationSpec("tune_four", ("ja", "stereo_left", "jfk", "fr"), 14, ("pause", "none", "overlap")),
        ConversationSpec("tune_three_b", ("libri1995", "ja", "de"), 12, ("overlap", "pause")),
        ConversationSpec("tune_two_b", ("stereo_left", "aishell0724"), 10, ("pause", "none", "overlap")),
    ],
    "held_out": [
        ConversationSpec("two_pauses", ("libri1272", "es"), 10, ("pause",)),
        ConversationSpec("three_no_pauses", ("aishell0764", "it", "ko"), 12, ("none",)),
        ConversationSpec("four_mixed", ("pt", "stereo_right", "es", "libri1272"), 14, ("pause", "none", "overlap")),
        ConversationSpec("three_overlaps", ("it", "pt", "stereo_right"), 12, ("overlap", "pause")),
        ConversationSpec("two_mixed", ("ko", "aishell0764"), 10, ("pause", "none", "overlap")),
    ],
}
MONOLOGUES = {
    "tuning": TUNING,
    "held_out": ("libri1272", "aishell0764", "es", "it", "pt"),
}


@dataclass
class Conversation:
    name: str
    pcm: np.ndarray  # 16 kHz mono float32
    reference: list[tuple[float, float, str]]  # turns: (start s, end s, speaker), sorted
    n_speakers: int


Vad = Callable[[np.ndarray], list[tuple[int, int]]]  # speech regions (samples) of 16 kHz PCM


def prepare_clip(pcm: np.ndarray, vad: Vad) -> np.ndarray:
    """The clip trimmed to its speech, levelled to -26 dBFS, with 0.25 s of silence after it."""
    regions = vad(pcm)
    clip = pcm[regions[0][0] : regions[-1][1]].astype(np.float64)
    clip *= 10 ** (TARGET_DBFS / 20) / np.sqrt(np.mean(clip**2))
    return np.concatenate([clip, np.zeros(SR // 4)]).astype(np.float32)


def _cut(source: np.ndarray, cursor: int, length: int) -> np.ndarray:
    return source[(cursor + np.arange(length)) % source.shape[0]]


def _stretch_turn(vad: Vad, piece: np.ndarray, offset: int, speaker: str, max_pause: float) -> list:
    """The reference turns of one placed stretch: its speech, pauses up to ``max_pause`` included."""
    turns: list[tuple[float, float, str]] = []
    for start, end in vad(piece):
        a, b = (offset + start) / SR, (offset + end) / SR
        if turns and a - turns[-1][1] <= max_pause:
            turns[-1] = (turns[-1][0], b, speaker)
        else:
            turns.append((a, b, speaker))
    return turns


def _join_turns(turns: list[tuple[float, float, str]], max_pause: float) -> list[tuple[float, float, str]]:
    """Join consecutive turns of one speaker when the pause is short and nobody else speaks in it."""
    turns = sorted(turns)
    out: list[tuple[float, float, str]] = []
    for turn in turns:
        same = [k for k, t in enumerate(out) if t[2] == turn[2]]
        if same:
            last = out[same[-1]]
            gap = (last[1], turn[0])
            others = any(t[2] != turn[2] and t[0] < gap[1] and t[1] > gap[0] for t in out + turns)
            if turn[0] - last[1] <= max_pause and not others:
                out[same[-1]] = (last[0], max(last[1], turn[1]), turn[2])
                continue
        out.append(turn)
    return sorted(out)


def build_conversation(
    clips: dict[str, np.ndarray], vad: Vad, spec: ConversationSpec, seed: int, *, max_pause: float = MAX_PAUSE
) -> Conversation:
    """A seeded conversation of ``spec.speakers`` (prepared clips by name) and its reference turns."""
    rng = np.random.default_rng([seed, spec.turns, *map(ord, spec.name)])
    speakers = list(spec.speakers)
    cursor = {s: int(rng.integers(0, clips[s].shape[0])) for s in speakers}
    order: list[str] = []
    for k in range(spec.turns):  # every speaker speaks; never the same speaker twice in a row
        choices = [s for s in speakers if not order or s != order[-1]] or speakers
        unseen = [s for s in choices if s not in order]
        order.append(unseen[0] if unseen and k >= spec.turns - len(speakers) else str(rng.choice(choices)))
    placed = []  # (start sample, samples, speaker)
    t = 0
    for k, s in enumerate(order):
        length = int(rng.uniform(2.0, 15.0) * SR)
        piece = _cut(clips[s], cursor[s], length)
        cursor[s] = (cursor[s] + length) % clips[s].shape[0]
        if k:
            join = str(rng.choice(spec.joins))
            if join == "pause":
                t += int(rng.uniform(0.3, 1.2) * SR)
            elif join == "overlap":
                t -= int(rng.uniform(0.2, 0.6) * SR)
        placed.append((t, piece, s))
        t += length
    pcm = np.zeros(t, np.float32)
    reference: list[tuple[float, float, str]] = []
    for start, piece, s in placed:
        pcm[start : start + piece.shape[0]] += piece
        reference += _stretch_turn(vad, piece, start, s, max_pause)
    peak = float(np.abs(pcm).max())
    if peak > 0.99:
        pcm *= np.float32(0.99 / peak)
    return Conversation(spec.name, pcm, _join_turns(reference, max_pause), len(speakers))


def build_monologue(
    clip: np.ndarray,
    vad: Vad,
    name: str,
    seed: int,
    *,
    seconds: tuple[float, float] = (60.0, 120.0),
    max_pause: float = MAX_PAUSE,
) -> Conversation:
    """One speaker's prepared clip as a seeded monologue of 60-120 s (see the module docstring)."""
    rng = np.random.default_rng([seed, *map(ord, name)])
    target = int(rng.uniform(*seconds) * SR)
    parts: list[np.ndarray] = []
    total = 0
    while total < target:
        if parts:
            pause = np.zeros(int(rng.uniform(0.3, 2.5) * SR), np.float32)
            parts.append(pause)
            total += pause.shape[0]
        length = min(int(rng.uniform(2.0, 15.0) * SR), max(SR, target - total))
        gain = np.float32(10 ** (rng.uniform(-6.0, 6.0) / 20))
        parts.append(_cut(clip, int(rng.integers(0, clip.shape[0])), length) * gain)
        total += length
    pcm = np.concatenate(parts)
    pcm = np.clip(pcm, -0.99, 0.99).astype(np.float32)
    return Conversation(name, pcm, _stretch_turn(vad, pcm, 0, name, max_pause), 1)


def speakers_of(specs: Sequence[ConversationSpec]) -> set[str]:
    return {s for spec in specs for s in spec.speakers}
