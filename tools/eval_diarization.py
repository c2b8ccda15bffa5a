"""Evaluate the speaker stage on conversations and monologues built from the real clips in shared/data.

``python tools/eval_diarization.py --out DIR [--sets held_out|tuning|held_out,tuning] [--seed N]``

What is built (seeded, identical every run) and which clips are held out is
``onespeech_tools.conversations``: the speakers are split once into a tuning set
(jfk, libri1995, aishell0724, de, fr, ja, stereo_left), on which the stage's
thresholds were chosen and calibrated, and a held-out set (libri1272, aishell0764,
es, it, ko, pt, stereo_right), from which the reported figures come. Each set has
five conversations of 2-4 speakers and single-speaker monologues of 60-120 s.

References are turns (a speaker's speech with their pauses of up to 2 s inside the
turn), as the stage's ``Turn`` is defined. Scores: DER (numpy, ``onespeech_tools.der``,
pyannote.metrics' definition: collar 0.25 s, overlap skipped) with the count given
and automatic, the count ``speakers="auto"`` finds on each conversation, and on each
monologue. ``--max-pause`` scores the stage with another turn pause (0 is the
behaviour before turns kept their pauses). RTTMs of references and hypotheses go to
``--out``, with results.json.

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
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # onespeech_tools when not installed

from onespeech_tools.conversations import (  # noqa: E402
    CLIPS,
    CONVERSATIONS,
    MONOLOGUES,
    Conversation,
    ConversationSpec,
    build_conversation,
    build_monologue,
    prepare_clip,
)
from onespeech_tools.data import shared_data_or_skip  # noqa: E402
from onespeech_tools.der import diarization_error_rate  # noqa: E402

SR = 16000


def load_clip(data: Path, spec: str) -> np.ndarray:
    from onespeech.features import load_audio

    name, _, channel = spec.partition("#")
    if not channel:
        return load_audio(data / "audio" / name)
    import soundfile
    import soxr

    audio, sr = soundfile.read(str(data / "audio" / name), dtype="float32", always_2d=True)
    mono = audio[:, int(channel)]
    if sr != SR:
        mono = soxr.resample(mono, sr, SR)
    return np.ascontiguousarray(mono, dtype=np.float32)


def write_rttm(path: Path, name: str, segments) -> None:
    lines = [
        f"SPEAKER {name} 1 {start:.3f} {end - start:.3f} <NA> <NA> {label} <NA> <NA>"
        for start, end, label in segments
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for RTTM files and results.json")
    parser.add_argument("--sets", default="held_out", help="comma list of held_out, tuning (default held_out)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-pause", type=float, default=None, help="turn pause in seconds (default: the stage's)")
    parser.add_argument(
        "--bench", type=float, default=0.0, help="time the stage on this many seconds instead"
    )
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    data = shared_data_or_skip("diarization evaluation")

    from onespeech.features import load_vad
    from onespeech.features.speaker_model import load_speaker_encoder
    from onespeech.speech.speakers.diarize import DiarizationOptions, Diarizer, turns_from_partials

    vad_model = load_vad()

    def vad(pcm: np.ndarray) -> list[tuple[int, int]]:
        return [(r.start, r.end) for r in vad_model.speech_regions(pcm) if r.end > r.start]

    args.out.mkdir(parents=True, exist_ok=True)
    encoder = load_speaker_encoder(threads=args.threads)
    if args.bench:
        return bench(args, data, vad, vad_model, encoder, Diarizer)

    sets = args.sets.split(",")
    unknown = [s for s in sets if s not in CONVERSATIONS]
    if unknown:
        parser.error(f"--sets {','.join(unknown)}: the sets are {', '.join(CONVERSATIONS)}")
    clips = {name: prepare_clip(load_clip(data, spec), vad) for name, spec in CLIPS.items()}
    base = DiarizationOptions()
    if args.max_pause is not None:
        base = replace(base, max_pause=args.max_pause)
    diarizer = Diarizer(encoder, vad_model, base)

    def hypothesis(conv: Conversation, count: int | None) -> list[tuple[float, float, str]]:
        return [(t.start, t.end, t.speaker) for t in turns_from_partials(embedded[conv.name], count, base)]

    results: dict = {"options": base.__dict__, "seed": args.seed}
    for set_name in sets:
        conversations = [build_conversation(clips, vad, spec, args.seed) for spec in CONVERSATIONS[set_name]]
        monologues = [build_monologue(clips[name], vad, name, args.seed) for name in MONOLOGUES[set_name]]
        embedded = {c.name: diarizer.embed(c.pcm) for c in [*conversations, *monologues]}
        rows = []
        for conv in conversations:
            given, auto = hypothesis(conv, conv.n_speakers), hypothesis(conv, None)
            write_rttm(args.out / f"{conv.name}.ref.rttm", conv.name, conv.reference)
            write_rttm(args.out / f"{conv.name}.given.rttm", conv.name, given)
            write_rttm(args.out / f"{conv.name}.auto.rttm", conv.name, auto)
            rows.append({
                "conversation": conv.name, "speakers": conv.n_speakers, "minutes": conv.pcm.shape[0] / SR / 60,
                "der_given": diarization_error_rate(conv.reference, given),
                "der_auto": diarization_error_rate(conv.reference, auto),
                "found_auto": len({label for _, _, label in auto}),
            })  # fmt: skip
        mono_rows = []
        for mono in monologues:
            auto = hypothesis(mono, None)
            write_rttm(args.out / f"mono_{mono.name}.auto.rttm", mono.name, auto)
            mono_rows.append({
                "monologue": mono.name, "seconds": mono.pcm.shape[0] / SR,
                "found_auto": len({label for _, _, label in auto}),
            })  # fmt: skip
        print(f"## {set_name} (seed {args.seed}, max_pause {base.max_pause} s)")
        print("| conversation | speakers | minutes | DER given | DER auto | speakers found (auto) |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['conversation']} | {r['speakers']} | {r['minutes']:.1f} | {100 * r['der_given']:.1f}% | "
                f"{100 * r['der_auto']:.1f}% | {r['found_auto']} |"
            )
        exact = sum(r["found_auto"] == r["speakers"] for r in rows)
        mean = {k: float(np.mean([r[k] for r in rows])) for k in ("der_given", "der_auto")}
        print(
            f"| mean | | | {100 * mean['der_given']:.1f}% | {100 * mean['der_auto']:.1f}% | "
            f"exact {exact}/{len(rows)} |"
        )
        print("\n| monologue | seconds | speakers found (auto) |\n|---|---:|---:|")
        for m in mono_rows:
            print(f"| {m['monologue']} | {m['seconds']:.0f} | {m['found_auto']} |")
        single = sum(m["found_auto"] == 1 for m in mono_rows)
        print(f"| one speaker | | {single}/{len(mono_rows)} |\n", flush=True)
        results[set_name] = {
            "conversations": rows, "mean": mean, "auto_exact": exact, "monologues": mono_rows, "one_speaker": single,
        }  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


def bench(args, data, vad, vad_model, encoder, diarizer_cls) -> int:
    speakers = ("jfk", "libri1995", "fr", "de")
    clips = {name: prepare_clip(load_clip(data, CLIPS[name]), vad) for name in speakers}
    spec = ConversationSpec("bench", speakers, max(4, int(args.bench / 8.5)), ("pause", "none", "overlap"))
    conv = build_conversation(clips, vad, spec, args.seed)
    diarizer = diarizer_cls(encoder, vad_model)
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
