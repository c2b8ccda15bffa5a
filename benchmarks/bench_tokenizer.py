"""Tokenizer benchmark: ours against transformers 4.57.6's Qwen2Tokenizer and Qwen2TokenizerFast.

Run in the reference environment with onespeech-tokenizer installed::

    <reference-env>/bin/pip install -e packages/onespeech-tokenizer
    <reference-env>/bin/python benchmarks/bench_tokenizer.py [--repeats N]

Encodes just under 1 MiB of seeded mixed multilingual text (Latin, CJK, Hangul,
Cyrillic, Arabic, Devanagari, Thai, digits, punctuation, emoji, whitespace runs)
and decodes the ids back, measuring ours, the slow class, the fast class and the
fast class's Rust backend (called directly) alternately in the same run. The
first encode of each (empty word caches) is its own row; the other rows take the
median over the repeats, min..max beside it. A second table encodes and decodes
the same text line by line (one call per line). A third encodes 1 MiB of one
repeated character, a single pre-token (the hostile case: ~7 s in our heap BPE
before the string passes), with a different length each run so no word cache
hits. All must produce identical ids and text, or the benchmark fails.
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
    # the Rust tokenizer itself, without transformers' Python wrapper around each call
    tokenizers["rust"], seconds["rust"] = tokenizers["fast"].backend_tokenizer, seconds["fast"]
    return tokenizers, seconds


def encoder(name: str, tok) -> Callable[[str], list[int]]:
    if name == "ours":
        return tok.encode
    if name == "rust":
        return lambda text: tok.encode(text, add_special_tokens=False).ids
    return lambda text: tok.encode(text, add_special_tokens=False)


def decoder(name: str, tok) -> Callable[[list[int]], str]:
    if name == "ours":
        return tok.decode
    return lambda ids: tok.decode(ids, skip_special_tokens=False)


def fmt_rate(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0] / 1e3:9.0f}k"
    return f"{statistics.median(values) / 1e3:.0f}k ({min(values) / 1e3:.0f}..{max(values) / 1e3:.0f})"


NAMES = ["ours", "slow", "fast", "rust"]


def measure(tokenizers: dict, inputs: list[str], repeats: int) -> dict:
    """tokens/s per tokenizer: first encode, then encode/decode/both over ``repeats`` runs."""
    rates: dict = {key: {n: [] for n in NAMES} for key in ("first", "encode", "decode", "both")}
    reference = None
    for rep in range(repeats + 1):
        for name in NAMES:  # alternate, so load changes on this shared machine hit all three alike
            encode, decode = encoder(name, tokenizers[name]), decoder(name, tokenizers[name])
            enc_s, ids = timed(lambda encode=encode: [encode(text) for text in inputs])
            dec_s, back = timed(lambda decode=decode, ids=ids: [decode(i) for i in ids])
            reference = ids if reference is None else reference
            if ids != reference or back != inputs:
                raise SystemExit(f"FAIL: {name} differs (ids equal to ours: {ids == reference}, "
                                 f"text round trip: {back == inputs})")
            n = sum(map(len, ids))
            if rep == 0:
                rates["first"][name].append(n / enc_s)
                continue
            rates["encode"][name].append(n / enc_s)
            rates["decode"][name].append(n / dec_s)
            rates["both"][name].append(n / (enc_s + dec_s))
    rates["n_tokens"] = sum(map(len, reference))
    return rates


REPEATED = ["a", " ", "語", "😀"]  # one to four UTF-8 bytes per character


def measure_repeated(tokenizers: dict, unit: str, repeats: int) -> dict[str, list[float]]:
    """Seconds per encode of just under 1 MiB of ``unit``, each run one character shorter (no cache hits)."""
    seconds: dict[str, list[float]] = {n: [] for n in NAMES}
    for rep in range(repeats):
        text = unit * (TARGET_BYTES // len(unit.encode("utf-8")) - rep)
        reference = None
        for name in NAMES:
            encode = encoder(name, tokenizers[name])
            took, ids = timed(lambda encode=encode, text=text: encode(text))
            reference = ids if reference is None else reference
            if ids != reference:
                raise SystemExit(f"FAIL: {name} ids differ from ours on {len(text)} x {unit!r}")
            seconds[name].append(took)
    return seconds


def print_repeated(tokenizers: dict, repeats: int) -> None:
    print(f"one pre-token: {TARGET_BYTES:,} bytes of one repeated character, uncached")
    print(f"{'character (s)':20}{'ours median (min..max)':>25}{'slow':>22}{'fast':>22}{'rust':>22}"
          f"{'ours/slow':>10}{'ours/fast':>10}{'ours/rust':>10}")
    for unit in REPEATED:
        sec = measure_repeated(tokenizers, unit, repeats)
        med = {n: statistics.median(sec[n]) for n in NAMES}
        cells = "".join(f"{f'{med[n]:.3f} ({min(sec[n]):.3f}..{max(sec[n]):.3f})':>{25 if n == 'ours' else 22}}"
                        for n in NAMES)
        # ratios of throughput, as in the tables above: anchor seconds / our seconds
        ratios = "".join(f"{med[n] / med['ours']:10.2f}" for n in NAMES[1:])
        print(f"{ascii(unit):20}{cells}{ratios}")


def print_table(title: str, rates: dict, with_first: bool) -> None:
    print(title)
    print(f"{'stage (tokens/s)':20}{'ours median (min..max)':>25}{'slow':>22}{'fast':>22}{'rust':>22}"
          f"{'ours/slow':>10}{'ours/fast':>10}{'ours/rust':>10}")
    rows = [("encode, first call", "first")] if with_first else []
    rows += [("encode", "encode"), ("decode", "decode"), ("encode + decode", "both")]
    for label, key in rows:
        med = {n: statistics.median(rates[key][n]) for n in NAMES}
        cells = f"{fmt_rate(rates[key]['ours']):>25}" + "".join(f"{fmt_rate(rates[key][n]):>22}" for n in NAMES[1:])
        ratios = "".join(f"{med['ours'] / med[n]:10.2f}" for n in NAMES[1:])
        print(f"{label:20}{cells}{ratios}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="measured runs after the first (default 5)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from onespeech_tools.data import shared_data_or_skip

    data = shared_data_or_skip("bench_tokenizer")
    tokenizers, load_s = load_all(data / "tokenizer")
    text = mixed_text()
    lines = [line for line in text.split("\n") if line]
    n_bytes = len(text.encode("utf-8"))

    import tokenizers as hf_tokenizers
    import transformers

    print(f"tokenizer | python {platform.python_version()} | transformers {transformers.__version__} | "
          f"tokenizers {hf_tokenizers.__version__} | cpus {os.cpu_count()} | load avg {os.getloadavg()[0]:.1f} "
          f"(machine shared) | repeats {args.repeats}")
    whole = measure(tokenizers, [text], args.repeats)
    print_table(f"one text of {n_bytes:,} bytes UTF-8 ({len(text):,} chars, {whole['n_tokens']:,} tokens), "
                "word caches empty on the first call", whole, with_first=True)
    per_line = measure(tokenizers, lines, args.repeats)
    print_table(f"the same text as {len(lines):,} lines, one encode/decode call each "
                f"({per_line['n_tokens']:,} tokens, caches warm)", per_line, with_first=False)
    print_repeated(tokenizers, args.repeats)
    print(f"{'load (s)':20}{load_s['ours']:>25.2f}{load_s['slow']:>22.2f}{load_s['fast']:>22.2f}{'':>22}"
          f"{load_s['slow'] / load_s['ours']:10.2f}{load_s['fast'] / load_s['ours']:10.2f}")
    print("slow: Qwen2Tokenizer; fast: Qwen2TokenizerFast.encode/decode; rust: its backend tokenizers.Tokenizer "
          "called directly.\nratios: ours/anchor throughput on medians (above 1: ours faster); "
          "load row: anchor/ours seconds")
    print(f"load avg at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
