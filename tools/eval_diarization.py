"""Evaluate the speaker stage on conversations built from the real clips in shared/data.

``python tools/eval_diarization.py --out DIR [--sets eval,dev] [--sweep]``

Conversations (seeded, rebuilt identically every run): speakers are distinct clips
(each clip is one speaker; the two channels of stereo_diarization.wav are two),
levelled to -26 dBFS; turns of 2-15 s cut from each speaker's clip looped; between
turns a pause (0.3-1.2 s), no pause, or a short overlap (0.2-0.6 s). The reference
of each speaker is Silero VAD (default settings) on that speaker's own track, so the
reference is what a listener with the separate tracks would mark as speech; it is
written as RTTM beside the hypotheses.

Scores: DER from pyannote.metrics (collar 0.25 s; overlap skipped and not), speaker
count given and automatic, and whether the automatic count is exact. pyannote.metrics
is a tool of this script only (install it in a scratch environment; it is no
dependency of the library). ``--sweep`` scores a grid of clustering settings on the
``dev`` set (other seeds than ``eval``) to choose the defaults; the ``eval`` table is
what docs/speakers.md quotes.

``--bench SECONDS`` instead times the speaker stage (VAD + encoder + clustering,
models loaded beforehand) on a conversation of that length and prints the time per
audio hour and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # onespeech_tools when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402

SR = 16000
TARGET_DBFS = -26.0
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
# (name, speakers, turns, joins): joins draws each junction from "pause", "none", "overlap"
EVAL_SET = [
    ("two_pauses", ["jfk", "libri1995"], 10, ("pause",)),
    ("three_no_pauses", ["aishell0724", "de", "libri1272"], 12, ("none",)),
    ("four_mixed", ["fr", "es", "it", "aishell0764"], 14, ("pause", "none", "overlap")),
    ("three_overlaps", ["ja", "pt", "ko"], 12, ("overlap", "pause")),
    ("stereo_channels", ["stereo_left", "stereo_right"], 10, ("pause", "none", "overlap")),
]
DEV_SET = [
    ("dev_two", ["fr", "libri1272"], 10, ("pause", "none")),
    ("dev_three", ["jfk", "ko", "aishell0724"], 12, ("pause", "none", "overlap")),
    ("dev_four", ["libri1995", "de", "ja", "stereo_left"], 14, ("none", "overlap", "pause")),
    ("dev_two_b", ["it", "aishell0764"], 10, ("overlap", "none")),
    ("dev_three_b", ["es", "pt", "stereo_right"], 12, ("pause", "none")),
]


@dataclass
class Conversation:
    name: str
    pcm: np.ndarray
    reference: list[tuple[float, float, str]]
    n_speakers: int


def load_clip(data: Path, spec: str) -> np.ndarray:
    import soundfile
    import soxr

    name, _, channel = spec.partition("#")
    audio, sr = soundfile.read(str(data / "audio" / name), dtype="float32", always_2d=True)
    mono = audio[:, int(channel)] if channel else audio.mean(axis=1)
    if sr != SR:
        mono = soxr.resample(mono, sr, SR)
    return np.ascontiguousarray(mono, dtype=np.float32)


def speech_bounds(vad, pcm: np.ndarray) -> tuple[int, int]:
    regions = vad.speech_regions(pcm)
    return regions[0].start, regions[-1].end


def build(
    data: Path, vad, name: str, speakers: list[str], n_turns: int, joins: tuple[str, ...], seed: int
) -> Conversation:
    rng = np.random.default_rng([seed, n_turns, *map(ord, name)])
    sources = {}
    for s in speakers:
        clip = load_clip(data, CLIPS[s])
        a, b = speech_bounds(vad, clip)
        clip = clip[a:b]
        rms = np.sqrt(np.mean(clip.astype(np.float64) ** 2))
        clip = clip * np.float32(10 ** (TARGET_DBFS / 20) / rms)
        gap = np.zeros(int(0.25 * SR), np.float32)
        sources[s] = np.concatenate([clip, gap])
    cursor = {s: int(rng.integers(0, sources[s].shape[0])) for s in speakers}
    order = []
    for k in range(n_turns):  # every speaker speaks; never the same speaker twice in a row
        choices = [s for s in speakers if not order or s != order[-1]] or speakers
        unseen = [s for s in choices if s not in order]
        order.append(unseen[0] if unseen and k >= n_turns - len(speakers) else str(rng.choice(choices)))
    tracks = {s: [] for s in speakers}  # (start sample, samples)
    t = 0
    for k, s in enumerate(order):
        length = int(rng.uniform(2.0, 15.0) * SR)
        src = sources[s]
        idx = (cursor[s] + np.arange(length)) % src.shape[0]
        cursor[s] = (cursor[s] + length) % src.shape[0]
        if k:
            join = str(rng.choice(joins))
            if join == "pause":
                t += int(rng.uniform(0.3, 1.2) * SR)
            elif join == "overlap":
                t -= int(rng.uniform(0.2, 0.6) * SR)
        tracks[s].append((t, src[idx]))
        t += length
    total = t
    pcm = np.zeros(total, np.float32)
    reference = []
    for s in speakers:
        track = np.zeros(total, np.float32)
        for start, piece in tracks[s]:
            track[start : start + piece.shape[0]] += piece
        pcm += track
        reference += [(r.start / SR, r.end / SR, s) for r in vad.speech_regions(track)]
    peak = np.abs(pcm).max()
    if peak > 0.99:
        pcm *= np.float32(0.99 / peak)
    return Conversation(name, pcm, sorted(reference), len(speakers))


def annotation(segments):
    from pyannote.core import Annotation, Segment

    ann = Annotation()
    for start, end, label in segments:
        ann[Segment(start, end)] = label
    return ann


def write_rttm(path: Path, name: str, segments) -> None:
    lines = [
        f"SPEAKER {name} 1 {start:.3f} {end - start:.3f} <NA> <NA> {label} <NA> <NA>"
        for start, end, label in segments
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def der(reference, hypothesis, skip_overlap: bool) -> float:
    from pyannote.metrics.diarization import DiarizationErrorRate

    metric = DiarizationErrorRate(collar=0.25, skip_overlap=skip_overlap)
    return float(metric(annotation(reference), annotation(hypothesis)))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for RTTM files and results.json")
    parser.add_argument("--sets", default="eval", help="comma list of eval, dev")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", action="store_true", help="grid over clustering settings (dev set)")
    parser.add_argument(
        "--bench", type=float, default=0.0, help="time the stage on this many seconds instead"
    )
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    data = shared_data_or_skip("diarization evaluation")

    from onespeech.features import SileroVad
    from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer, turns_from_partials
    from onespeech.speech.speakers.model import load_speaker_encoder, vad_model_path

    vad = SileroVad.load(vad_model_path())
    args.out.mkdir(parents=True, exist_ok=True)
    if args.bench:
        return bench(args, data, vad, load_speaker_encoder(threads=args.threads), Diarizer)

    encoder = load_speaker_encoder(threads=args.threads)
    chosen = {"eval": EVAL_SET, "dev": DEV_SET}
    conversations = [
        build(data, vad, name, spk, turns, joins, args.seed + (0 if set_name == "eval" else 1000))
        for set_name in args.sets.split(",")
        for name, spk, turns, joins in chosen[set_name]
    ]
    base = DiarizationOptions()
    embedded = {}
    for conv in conversations:
        write_rttm(args.out / f"{conv.name}.ref.rttm", conv.name, conv.reference)
        diarizer = Diarizer(encoder, vad, base)
        embedded[conv.name] = diarizer.embed(conv.pcm)

    def score(options: DiarizationOptions, write: bool) -> list[dict]:
        rows = []
        for conv in conversations:
            row = {
                "conversation": conv.name,
                "speakers": conv.n_speakers,
                "minutes": conv.pcm.shape[0] / SR / 60,
            }
            for mode, count in (("given", conv.n_speakers), ("auto", None)):
                turns = turns_from_partials(embedded[conv.name], count, options)
                hyp = [(t.start, t.end, t.speaker) for t in turns]
                if write:
                    write_rttm(args.out / f"{conv.name}.{mode}.rttm", conv.name, hyp)
                row[f"der_{mode}"] = der(conv.reference, hyp, skip_overlap=False)
                row[f"der_{mode}_no_overlap"] = der(conv.reference, hyp, skip_overlap=True)
                row[f"found_{mode}"] = len({t.speaker for t in turns})
            rows.append(row)
        return rows

    if args.sweep:
        results = []
        for split in (0.5, 0.6, 0.7):
            for min_cluster in (1.0, 1.5, 2.0):
                options = replace(base, split_similarity=split, min_cluster_seconds=min_cluster)
                rows = score(options, write=False)
                summary = {
                    "split_similarity": split, "min_cluster_seconds": min_cluster,
                    "der_given": float(np.mean([r["der_given"] for r in rows])),
                    "der_auto": float(np.mean([r["der_auto"] for r in rows])),
                    "exact": sum(r["found_auto"] == r["speakers"] for r in rows),
                }  # fmt: skip
                results.append(summary)
                print(json.dumps(summary), flush=True)
        (args.out / "sweep.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        return 0

    rows = score(base, write=True)
    print(
        "| conversation | speakers | minutes | DER given | DER given (overlap skipped) | DER auto | "
        "DER auto (overlap skipped) | speakers found (auto) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['conversation']} | {r['speakers']} | {r['minutes']:.1f} | {100 * r['der_given']:.1f}% | "
            f"{100 * r['der_given_no_overlap']:.1f}% | {100 * r['der_auto']:.1f}% | "
            f"{100 * r['der_auto_no_overlap']:.1f}% | {r['found_auto']} |"
        )
    exact = sum(r["found_auto"] == r["speakers"] for r in rows)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k.startswith("der_")}
    print(
        f"| mean | | | {100 * mean['der_given']:.1f}% | {100 * mean['der_given_no_overlap']:.1f}% | "
        f"{100 * mean['der_auto']:.1f}% | {100 * mean['der_auto_no_overlap']:.1f}% | exact {exact}/{len(rows)} |"
    )
    (args.out / "results.json").write_text(
        json.dumps({"options": base.__dict__, "rows": rows, "mean": mean, "auto_exact": exact}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    return 0


def bench(args, data, vad, encoder, diarizer_cls) -> int:
    speakers = ["jfk", "libri1995", "fr", "de"]
    n_turns = max(4, int(args.bench / 8.5))
    conv = build(data, vad, "bench", speakers, n_turns, ("pause", "none", "overlap"), args.seed)
    diarizer = diarizer_cls(encoder, vad)
    diarizer(conv.pcm[: SR * 5], 2)  # warm up
    start = time.perf_counter()
    cpu = time.process_time()
    turns = diarizer(conv.pcm, "auto")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    hours = conv.pcm.shape[0] / SR / 3600
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "audio_seconds": round(conv.pcm.shape[0] / SR, 1), "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
        "wall_seconds_per_audio_hour": round(wall / hours, 1), "turns": len(turns),
        "speakers_found": len({t.speaker for t in turns}), "peak_rss_mib": round(rss, 1), "threads": args.threads,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
