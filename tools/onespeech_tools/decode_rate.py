"""Decode tokens per second of several precisions of one checkpoint, in interleaved blocks in one process.

    python -m onespeech_tools.decode_rate CHECKPOINT [--precisions fp32 bf16 int8] [--tokens 32]
        [--rounds 7] [--threads 2] [--seconds 10]

Loads every precision of ``CHECKPOINT`` (converting it there on first use), prefills
each once with the prompt of a ``--seconds`` test tone, then times blocks of
``--tokens`` decode steps from the same cache position (embedding, the decoder, the
output head, the argmax), fed the ids that precision chose greedily. The precisions'
blocks alternate, in a rotating order, so a drift of the machine's bandwidth falls on
all of them; printed are each precision's median ms per token and tokens/s, and the
median per round of its time over the first precision's (the anchor).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np


class DecodeBlock:
    """One precision's decoder after its prompt, ready to time blocks of forced steps."""

    def __init__(self, recognizer, pcm: np.ndarray, tokens: int) -> None:  # type: ignore[no-untyped-def]
        from onespeech.kernels import ops

        self._ops, self._dec = ops, recognizer.decoder
        chunk = recognizer.recognize(pcm, "English", tokens + 1, min_new_tokens=tokens + 1)
        prompt = chunk.prompt
        embeds = self._dec.embed(prompt.ids)
        embeds[prompt.audio_start : prompt.audio_start + prompt.n_audio] = chunk.audio_embeds
        self._ids = chunk.generation.ids[:tokens]
        self._cache = self._dec.cache_for(embeds.shape[0] + tokens)
        self._dec.forward(embeds, self._cache)
        self._start = self._cache.length

    def ms_per_token(self) -> float:
        dec, cache, ops = self._dec, self._cache, self._ops
        cache.length = self._start  # the same positions again: rows are overwritten
        t0 = time.perf_counter()
        for token in self._ids:
            hidden = dec.forward(dec.embed(np.array([token])), cache)
            ops.argmax(dec.logits(hidden[-1]))
        return (time.perf_counter() - t0) / len(self._ids) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a writable model directory (publisher or runtime files)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"])
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per timed block")
    parser.add_argument("--rounds", type=int, default=7, help="timed blocks per precision")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the test tone prompted")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.rounds < 1:
        parser.error("--tokens and --rounds must be at least 1")

    from onespeech.kernels import info
    from onespeech.kernels.threads import thread_limit
    from onespeech.qwen3 import Precision, Qwen3Options, Qwen3Recognizer
    from onespeech_tools.signals import tone

    pcm = tone(args.seconds)
    names = list(dict.fromkeys(Precision.parse(p).value for p in args.precisions))
    recognizers = {p: Qwen3Recognizer.load(args.checkpoint, Qwen3Options(
        threads=args.threads, max_new_tokens=args.tokens + 1, precision=p)) for p in names}  # fmt: skip
    times: dict[str, list[float]] = {p: [] for p in names}
    ratios: dict[str, list[float]] = {p: [] for p in names}
    try:
        with thread_limit(args.threads):
            blocks = {p: DecodeBlock(rec, pcm, args.tokens) for p, rec in recognizers.items()}
            for block in blocks.values():  # warm-up: page the weights in
                block.ms_per_token()
            for i in range(args.rounds):
                order = names[i % len(names) :] + names[: i % len(names)]
                for p in order:
                    times[p].append(blocks[p].ms_per_token())
                for p in names:
                    ratios[p].append(times[p][-1] / times[names[0]][-1])
    finally:
        for rec in recognizers.values():
            rec.close()
    print(f"{args.checkpoint.name} | kernels {info()['variant']} | threads {args.threads} | "
          f"{args.tokens} tokens per block | {args.rounds} rounds")  # fmt: skip
    print(f"{'precision':<10}{'ms/token':>10}{'(min..max)':>18}{'tokens/s':>10}{f'time/{names[0]}':>14}{'(min..max)':>16}")
    for p in names:
        t, r = times[p], ratios[p]
        print(f"{p:<10}{statistics.median(t):10.1f}{f'({min(t):.1f}..{max(t):.1f})':>18}"
              f"{1e3 / statistics.median(t):10.1f}{statistics.median(r):14.3f}{f'({min(r):.2f}..{max(r):.2f})':>16}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
