"""Tokenizer benchmark: ours against transformers 4.57.6's Qwen2Tokenizer and Qwen2TokenizerFast.

Run in the reference environment with onespeech-tokenizer installed::

    /work/refenv/bin/pip install -e packages/onespeech-tokenizer
    flock /work/heavy.lock /work/refenv/bin/python benchmarks/bench_tokenizer.py [--repeats N]

Encodes just under 1 MiB of seeded mixed multilingual text (Latin, CJK, Hangul,
Cyrillic, Arabic, Devanagari, Thai, digits, punctuation, emoji, whitespace runs)
and decodes the ids back, with the three tokenizers measured alternately in the
same run. The first encode of each (empty word caches) is its own row; the
other rows take the median over the repeats, min..max beside it. All three
must produce identical ids and text, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_BYTES = 1_040_000  # just under the 1 MiB (1,048,576 bytes) encode limit

SENTENCES = [
    "The quick brown fox jumps over the lazy dog, doesn't it? We'll see what they've done.",
    "Speech recognition models transcribe audio into text; OneSpeech runs Qwen3-ASR on the CPU.",
    "我们今天去北京天安门广场参观，天气非常好。语音识别模型把声音转换成文字。",
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。",
    "안녕하세요, 저는 한국어를 공부하고 있습니다. 오늘 날씨가 정말 좋네요.",
    "Привет, мир! Москва — столица России, а съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم، هذا نص عربي قصير لاختبار المقطع.",
    "नमस्ते दुनिया, यह हिन्दी में एक छोटा वाक्य है।",
    "สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "Grüße aus München: Straße, Mädchen, schön. Garçon, élève, œuvre, Noël.",
    "Tiếng Việt có dấu: người đẹp, cảm ơn bạn rất nhiều.",
    "Prices: $19.99, €5,00, 3.14159, 2026-01-29 12:34:56, +1 (555) 010-9999.",
    "Emoji 😀🎉👍🏽 and astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁, math 𝟙𝟚𝟛.",
    "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]\n",
    "tabs\tand   multiple    spaces   \n\n\n  newlines\r\n\r\nCRLF  \n",
]


def mixed_text(seed: int = 20260129, target_bytes: int = TARGET_BYTES) -> str:
    """Seeded paragraphs of shuffled sentences and words, as long as fits in target_bytes."""
    rng = random.Random(seed)
    words = [w for s in SENTENCES for w in s.split()]
    parts: list[str] = []
    size = 0
    while True:
        if rng.random() < 0.5:
            piece = rng.choice(SENTENCES)
        else:
            piece = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + rng.choice([". ", "\n", "。"])
        piece += rng.choice([" ", " ", "\n", "\n\n"])
        n = len(piece.encode("utf-8"))
        if size + n > target_bytes:
            return "".join(parts)
        parts.append(piece)
        size += n


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def load_all(tokenizer_dir: Path):
    from transformers import Qwen2Tokenizer, Qwen2TokenizerFast
    from transformers.utils import logging
    logging.set_verbosity_error()  # "sequence length is longer than 131072": expected here

    from onespeech.tokenizer import Qwen3Tokenizer

    loads = {
        "ours": lambda: Qwen3Tokenizer.load(tokenizer_dir),
        "slow": lambda: Qwen2Tokenizer.from_pretrained(str(tokenizer_dir)),
        "fast": lambda: Qwen2TokenizerFast.from_pretrained(str(tokenizer_dir)),
    }
    seconds, tokenizers = {}, {}
    for name, load in loads.items():
        seconds[name], tokenizers[name] = timed(load)
    return tokenizers, seconds


def encoder(name: str, tok) -> Callable[[str], list[int]]:
    if name == "ours":
        return tok.encode
    return lambda text: tok.encode(text, add_special_tokens=False)


def fmt_rate(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0] / 1e3:9.0f}k"
    return f"{statistics.median(values) / 1e3:7.0f}k ({min(values) / 1e3:.0f}..{max(values) / 1e3:.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured runs after the first (default 5)")
    args = parser.parse_args()
    data = Path(os.environ.get("ONESPEECH_TEST_DATA", ROOT.parent / "shared" / "data"))
    tokenizers, load_s = load_all(data / "tokenizer")
    text = mixed_text()
    n_bytes = len(text.encode("utf-8"))

    names = ["ours", "slow", "fast"]
    encode_rates: dict[str, list[float]] = {n: [] for n in names}
    decode_rates: dict[str, list[float]] = {n: [] for n in names}
    both_rates: dict[str, list[float]] = {n: [] for n in names}
    cold: dict[str, float] = {}
    reference_ids = None
    for rep in range(args.repeats + 1):
        for name in names:  # alternate, so load changes on this shared machine hit all three alike
            tok = tokenizers[name]
            enc_s, ids = timed(lambda tok=tok, name=name: encoder(name, tok)(text))
            dec_s, back = timed(lambda tok=tok, ids=ids: tok.decode(ids))
            reference_ids = ids if reference_ids is None else reference_ids
            if ids != reference_ids or back != text:
                print(f"FAIL: {name} differs from ours (ids equal: {ids == reference_ids}, "
                      f"text round trip: {back == text})", file=sys.stderr)
                return 1
            n = len(ids)
            if rep == 0:
                cold[name] = n / enc_s
                continue
            encode_rates[name].append(n / enc_s)
            decode_rates[name].append(n / dec_s)
            both_rates[name].append(n / (enc_s + dec_s))

    import tokenizers as hf_tokenizers
    import transformers

    print(f"tokenizer | text {n_bytes:,} bytes UTF-8, {len(text):,} chars, {len(reference_ids):,} tokens | "
          f"python {platform.python_version()} | transformers {transformers.__version__} | "
          f"tokenizers {hf_tokenizers.__version__} | cpus {os.cpu_count()} | load avg {os.getloadavg()[0]:.1f} | "
          f"repeats {args.repeats}")
    header = (f"{'stage (tokens/s)':24}{'ours median (min..max)':>26}{'slow':>26}{'fast':>26}"
              f"{'ours/slow':>11}{'ours/fast':>11}")
    print(header)
    rows = [("encode, first call", {n: [cold[n]] for n in names}), ("encode", encode_rates),
            ("decode", decode_rates), ("encode + decode", both_rates)]
    for label, rates in rows:
        med = {n: statistics.median(rates[n]) for n in names}
        print(f"{label:24}{fmt_rate(rates['ours']):>26}{fmt_rate(rates['slow']):>26}{fmt_rate(rates['fast']):>26}"
              f"{med['ours'] / med['slow']:11.2f}{med['ours'] / med['fast']:11.2f}")
    print(f"{'load (s)':24}{load_s['ours']:>26.2f}{load_s['slow']:>26.2f}{load_s['fast']:>26.2f}"
          f"{load_s['slow'] / load_s['ours']:11.2f}{load_s['fast'] / load_s['ours']:11.2f}")
    print("ratios: ours/anchor throughput on medians (above 1: ours faster); load row: anchor/ours seconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
