"""Live-session latency: from the block that closes a VAD region to the returned final.

``python benchmarks/bench_stream_latency.py [--size tiny|0.6b] [--block-ms 100] [--repeat 3] [--aligner]``

A LiveSession (region chunking) is fed a real clip in blocks of ``--block-ms`` as
fast as it takes them. For every block that returns finals, the time of that
``push`` call is the latency (VAD of the block + recognition of the closed chunk).
The anchor, measured in the same run, is the file path's per-chunk work on the same
samples with the same models (``chunk_final``: ``recognize_chunk``, and with
``--aligner`` also ``time_chunk``): the latency over it says what streaming adds.
Blocks that close nothing measure the VAD cost per block. Random seeded checkpoints
(the real weights cannot be downloaded here) with ``end_scale`` so greedy decoding
ends; ``--aligner`` adds a generated aligner (``max_slot`` as in the tests) and times
every final's words (use ``--language en``: random weights identify no language).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))

from onespeech_tools.data import SKIP_STATUS, find_shared_data  # noqa: E402

END_SCALE = {"tiny": 0.1, "0.6b": 0.1}
MAX_SLOT = 120  # aligner slots within 9.6 s, as the tests' tiny aligner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "0.6b"), default="tiny")
    parser.add_argument("--model", default=None, help="an existing checkpoint directory (default: generate one)")
    parser.add_argument("--clip", default="jfk.flac", help="clip under shared/data/audio (default jfk.flac)")
    parser.add_argument("--block-ms", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=512,
                        help="token budget per chunk (a checkpoint without end_scale decodes up to it)")
    parser.add_argument("--aligner", action="store_true", help="time each final's words (a generated aligner)")
    parser.add_argument("--aligner-model", default=None, help="an existing aligner checkpoint directory")
    parser.add_argument("--language", default=None, help="force the language (default: identified per chunk)")
    args = parser.parse_args()
    data = find_shared_data()
    if data is None:
        print("skipped: the shared data folder is not on this machine")
        return SKIP_STATUS

    from onespeech.features import Chunk, ClosedChunk, load_audio
    from onespeech.speech.streaming import LiveSession, chunk_final

    pcm = load_audio(data / "audio" / args.clip)
    block = 16 * args.block_ms
    with tempfile.TemporaryDirectory(prefix="onespeech-latency-") as tmp:
        model = Path(args.model) if args.model else _checkpoint(Path(tmp), args.size, data)
        model_name = model.name
        aligner = None
        if args.aligner or args.aligner_model:
            aligner = Path(args.aligner_model) if args.aligner_model else _checkpoint(Path(tmp), args.size, data,
                                                                                     "aligner")
            model_name += f" + {aligner.name}"
        started = time.perf_counter()
        session = LiveSession(model, language=args.language, aligner=aligner, vad=data / "models" / "silero_vad.onnx",
                              threads=args.threads, max_new_tokens=args.max_new_tokens)
        load_s = time.perf_counter() - started
        latencies, anchors, idle, chunk_s, tokens, timed = [], [], [], [], [], []
        with session:
            for _ in range(args.repeat):
                session.reset()  # a fresh stream, same loaded models
                for offset in range(0, pcm.shape[0], block):
                    t0 = time.perf_counter()
                    finals = session.push(pcm[offset : offset + block])
                    elapsed = time.perf_counter() - t0
                    (latencies if finals else idle).append(elapsed)
                    anchor = 0.0
                    for final in finals:
                        start, end = round(final.start * 16000), round(final.end * 16000)
                        t0 = time.perf_counter()
                        again = chunk_final(session.recognizer, session.dispatcher,
                                            ClosedChunk(Chunk(start, end), pcm[start:end]), language=args.language,
                                            cancel=None)
                        anchor += time.perf_counter() - t0
                        chunk_s.append(final.end - final.start)
                        tokens.append(len(session.recognizer.tokenizer.encode(final.text)))
                        timed.append(sum(w.start is not None for w in final.words))
                        assert again == final, "a live final differs from the offline chunk"
                    if finals:
                        anchors.append(anchor)
                session.finish()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"size={args.size} model={model_name} clip={args.clip} ({pcm.shape[0] / 16000:.1f} s) "
          f"language={args.language} block={args.block_ms} ms threads={args.threads} "
          f"max_new_tokens={args.max_new_tokens} "
          f"repeat={args.repeat} load={load_s:.2f} s (a generated checkpoint is converted there) peak RSS={rss:.0f} MiB")
    if not latencies:
        print("no region closed before the end of the clip")
        return 1
    print(f"finals closed by a block: {len(latencies)} (chunks {min(chunk_s):.2f}-{max(chunk_s):.2f} s; text "
          f"tokens per final, re-encoded: median {statistics.median(tokens):.0f}, max {max(tokens)}; timed words "
          f"per final: median {statistics.median(timed):.0f})")
    print(f"latency (closing block -> final): median {statistics.median(latencies) * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms")
    print(f"anchor (chunk_final on the same samples): median {statistics.median(anchors) * 1000:.1f} ms; "
          f"ratio latency/anchor median {statistics.median(a / b for a, b in zip(latencies, anchors, strict=True)):.3f}")
    print(f"blocks closing nothing (VAD only): median {statistics.median(idle) * 1000:.2f} ms per "
          f"{args.block_ms} ms block")
    return 0


def _checkpoint(root: Path, size: str, data: Path, kind: str = "asr") -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    print(f"generating a {size} {kind} checkpoint ...", flush=True)
    if kind == "aligner":
        return make_checkpoint(root / f"aligner-{size}", size, seed=0, kind="aligner", data_dir=data,
                               max_slot=MAX_SLOT)
    return make_checkpoint(root / f"asr-{size}", size, seed=0, data_dir=data, end_scale=END_SCALE[size])


if __name__ == "__main__":
    raise SystemExit(main())
