"""Batched decode throughput: tokens/s of B sequences decoded together against one at a time.

    python benchmarks/bench_batch_decode.py [--size tiny|0.6b] [--precision fp32 bf16 int8]
        [--batch 1 2 4 8] [--prompt 120] [--tokens 16] [--rounds 5] [--threads 2]

A seeded random checkpoint of the given size (``onespeech_tools.checkpoints``; its
shapes are the released model's for 0.6b) is written to a temporary folder and loaded
per precision. Each of B sequences is prefilled alone with a random prompt of
``--prompt`` positions into a cache of its own; a timed block is ``--tokens`` decode
steps (embedding, decoder, head; forced random ids, from the same cache positions
each round). ``one at a time`` runs the current one-sequence path (``forward`` +
``logits``) B = 1 ... max(batch) times in turn; ``batch B`` runs ``step_batch`` over B
sequences. Blocks of every row alternate within a round, so drift falls on all;
printed: the median tokens/s over the rounds and its ratio to the one-at-a-time
median of the same run. Every batched row is checked bit-identical to the same
sequence decoded alone, once, before timing.

    python benchmarks/bench_batch_decode.py --transcribe AUDIO --asr DIR --vad silero_vad.onnx
        [--tokens 100] [--rounds 3] [--threads 2] [--precision fp32]

``--transcribe``: the file path end to end on a model directory (``transcribe`` of
AUDIO, recognition only: no aligner, no speakers), its chunks decoded one at a time
(``decode_batch=1``) and together (the default ``decode_batch``), in alternating
rounds on one recognizer per mode, loaded before timing (``keep_loaded``). ``--tokens`` is every chunk's token budget and is counted as its end (a
random checkpoint's answers never end). Printed: each mode's median seconds and
the ratio; the two Documents must be identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from source_tree import require_compiled_kernels, source_paths  # noqa: E402

sys.path[:0] = source_paths("tokenizer", "kernels", "features", "qwen3") + [str(ROOT / "tools")]
import onespeech.kernels  # noqa: E402,F401,I001  (sets OPENBLAS_THREAD_TIMEOUT unless set)
import numpy as np  # noqa: E402


class _Sequences:
    """B prefilled sequences of one decoder, ready to time blocks of forced steps."""

    def __init__(self, decoder, batch: int, prompt: int, tokens: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.decoder, self.tokens = decoder, tokens
        vocab = min(decoder.dims.vocab_size, 151000)  # ids of real tokens
        self.caches, self.ids = [], []
        for _ in range(batch):
            cache = decoder.new_cache(prompt + tokens)
            decoder.forward(decoder.embed(rng.integers(0, vocab, prompt)), cache)
            self.caches.append(cache)
            self.ids.append([int(i) for i in rng.integers(0, vocab, tokens)])
        self.start = prompt

    def _reset(self) -> None:
        for cache in self.caches:
            cache.length = self.start  # the same positions again: rows are overwritten

    def one_at_a_time(self) -> list[np.ndarray]:
        """Each sequence's steps by the one-sequence path; the last logits of each."""
        from onespeech.kernels import ops

        self._reset()
        dec, last = self.decoder, []
        for cache, ids in zip(self.caches, self.ids, strict=True):
            for token in ids:
                logits = dec.logits(dec.forward(dec.embed(np.array([token])), cache)[-1])
                ops.argmax(logits)
            last.append(logits)
        return last

    def together(self) -> np.ndarray:
        """All sequences' steps by step_batch; the last logits (B, V)."""
        from onespeech.kernels import ops

        self._reset()
        for t in range(self.tokens):
            logits = self.decoder.step_batch([ids[t] for ids in self.ids], self.caches)
            for row in logits:
                ops.argmax(row)
        return logits


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _bench_transcribe(args: argparse.Namespace) -> int:
    sys.path[:0] = source_paths("align", "speech")
    import importlib

    from onespeech.kernels import describe
    from onespeech.speech import Transcriber

    pipeline = importlib.import_module("onespeech.speech.transcribe")

    class _BudgetIsTheEnd:  # a chunk that reaches the budget counts as ended (random weights never end)
        MAX_NEW_TOKENS = object()

    pipeline.Finish = _BudgetIsTheEnd
    precision = args.precision[0]
    common = dict(aligner=None, speakers=False, threads=args.threads, max_new_tokens=args.tokens, vad=args.vad,
                  precision=precision, progress=False, keep_loaded=True)
    modes = {"one at a time": Transcriber(args.asr, decode_batch=1, **common), "batched": Transcriber(args.asr, **common)}
    print(f"# {describe()}; {args.transcribe}, {precision}, {args.tokens} tokens per chunk, {args.rounds} rounds, "
          f"{args.threads} threads")
    try:
        for t in modes.values():
            t.recognizer()  # loaded before timing (keep_loaded)
        documents = {}
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for round_ in range(args.rounds):
            for mode, t in modes.items():
                start = time.perf_counter()
                documents[mode] = t.transcribe(args.transcribe)
                times[mode].append(time.perf_counter() - start)
                print(f"# round {round_ + 1} {mode}: {times[mode][-1]:.1f} s", flush=True)
        if len({d.to_json() for d in documents.values()}) != 1:
            sys.exit("the batched Document differs from the one-at-a-time Document")
    finally:
        for t in modes.values():
            t.close()
    chunks = len(next(iter(documents.values())).segments)
    base = statistics.median(times["one at a time"])
    for mode, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{mode:<16}{median:>8.1f} s  x{base / median:.2f} ({chunks} segments; rounds: "
              f"{', '.join(f'{x:.1f}' for x in seconds)})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "0.6b"), default="tiny")
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16", "int8"),
                        default=["fp32", "bf16"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--prompt", type=int, default=120, help="prompt positions per sequence")
    parser.add_argument("--tokens", type=int, default=16, help="decode steps per timed block")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--transcribe", metavar="AUDIO", help="time the file path on AUDIO (see above)")
    parser.add_argument("--asr", help="--transcribe: the ASR model directory")
    parser.add_argument("--vad", help="--transcribe: silero_vad.onnx")
    args = parser.parse_args()
    if args.transcribe:
        if not args.asr or not args.vad:
            parser.error("--transcribe needs --asr and --vad")
        require_compiled_kernels()
        return _bench_transcribe(args)
    if min(args.batch) < 1 or args.tokens < 1 or args.rounds < 1 or args.prompt < 1:
        parser.error("--batch, --tokens, --rounds and --prompt must be at least 1")
    require_compiled_kernels()

    from onespeech.kernels import describe
    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Qwen3Recognizer
    from onespeech_tools.checkpoints import make_checkpoint

    print(f"# {describe()}; size {args.size}, prompt {args.prompt}, {args.tokens} steps per block, "
          f"{args.rounds} rounds, {args.threads} threads")
    print(f"{'precision':<10}{'mode':<16}{'tokens/s':>10}{'x one':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = make_checkpoint(Path(tmp) / "model", args.size, seed=0, kind="asr")
        for precision in args.precision:
            with Qwen3Recognizer.load(checkpoint, precision=precision, threads=args.threads) as rec, \
                    thread_limit(args.threads):
                rows = {b: _Sequences(rec.decoder, b, args.prompt, args.tokens, seed=b) for b in args.batch}
                # each batched row equals its sequence decoded alone
                for b, seqs in rows.items():
                    alone = np.stack(seqs.one_at_a_time())
                    if not np.array_equal(seqs.together().view(np.uint32), alone.view(np.uint32)):
                        sys.exit(f"batch {b}: the batched logits differ from decoding each sequence alone")
                one = rows[max(args.batch)]
                times: dict[str, list[float]] = {"one at a time": []} | {f"batch {b}": [] for b in args.batch}
                for _ in range(args.rounds):
                    times["one at a time"].append(len(one.caches) * args.tokens / _timed(one.one_at_a_time))
                    for b, seqs in rows.items():
                        times[f"batch {b}"].append(b * args.tokens / _timed(seqs.together))
                base = statistics.median(times["one at a time"])
                for mode, rates in times.items():
                    rate = statistics.median(rates)
                    print(f"{precision:<10}{mode:<16}{rate:>10.1f}{rate / base:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
