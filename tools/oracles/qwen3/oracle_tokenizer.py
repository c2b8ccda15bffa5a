"""Tokenizer oracle: transformers 4.57.6 on the shared Qwen3-ASR tokenizer files.

Usage (reference environment)::

    python tools/oracles/qwen3/oracle_tokenizer.py --out DIR [--update]

Loads ``Qwen2Tokenizer`` (slow, pure Python with the ``regex`` module) and
``Qwen2TokenizerFast`` (tokenizers/Rust) from vocab.json + merges.txt +
tokenizer_config.json, WITHOUT qwen-asr's ``fix_mistral_regex=True`` (which
swaps in a different split; see docs/tokenizer.md), and checks that the fast
pre-tokenizer is the standard Qwen2 pattern. For every string of the committed
synthetic corpus (``tokenizer_observations.json`` next to this script) it
records, for both classes: encode ids (``add_special_tokens=False``) and the
decoded text of a decode input, with and without ``skip_special_tokens``. For
the hand-picked edge cases it also records the fast pre-tokenizer's pieces.
It also regenerates onespeech-tokenizer's Unicode class tables from the fast
tokenizer's regex engine.

Writes ``DIR/tokenizer/observations.json`` (same format as the fixture) and
exits 1 if anything differs from the committed fixture or tables (drift).
``--update`` regenerates the corpus (seeded) and rewrites the fixture and tables.

The fixture holds only synthetic strings and observations. Record keys:
``text``; ``ids`` (slow encode); ``fast_ids`` (only if it differs from ``ids``);
``decode_ids`` (decode input, only if it differs from ``ids``); ``decoded`` and
``decoded_skip`` (slow decode without / with skipping; ``decoded_skip`` only if
it differs from ``decoded``); ``fast_decoded`` / ``fast_decoded_skip`` (only if
they differ from the slow values); ``pieces`` (edge cases without added-token
spellings: fast pre-tokenizer pieces of the NFC text, byte-level spelled).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import unicodedata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FIXTURE = HERE / "tokenizer_observations.json"
TABLES = ROOT / "packages/onespeech-tokenizer/src/onespeech/tokenizer/_unicode_tables.py"
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SEED = 20260129
N_GENERATED = 2000
sys.path.insert(0, str(HERE.parents[1]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402


def shared_tokenizer_dir() -> Path:
    return shared_data_or_skip("oracle_tokenizer") / "tokenizer"


# ---------------------------------------------------------------- the corpus

CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]
ADDED_SPELLINGS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>", "<|vision_pad|>",
    "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<blank1>", "<blank9>", "<blank10>", "<blank27>", "<asr_text>", "<non_speech>",
    "<think>", "</think>", "<tool_call>", "<|fim_prefix|>", "<|file_sep|>",
]
NEAR_MISSES = [
    "<|im_start|", "<|im_start>", "|im_start|>", "<|IM_START|>", "< |im_start|>", "<|im_start |>", "<|im_start||>",
    "<<|im_start|>>", "<|im_start|><", "<blank0>", "<blank28>", "<blank01>", "<Blank1>", "<asr_text", "asr_text>",
    "<timestamp>", "＜|im_start|＞", "<|im\u200bstart|>", "<tts_text_bos_singl>", "<|endoftext|",
]
WORDS = {
    "en": ["hello", "World", "THE", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "it", "don", "we",
           "iPhone", "McDonald", "camelCase", "XMLHttpRequest", "naïve", "café", "résumé", "OK", "a", "I"],
    "de": ["Grüße", "Straße", "über", "Mädchen", "ÄÖÜ", "schön"],
    "fr": ["garçon", "être", "œuvre", "élève", "Noël"],
    "el": ["καλημέρα", "Ελλάδα", "ψυχή", "ΑΘΗΝΑ"],
    "ru": ["привет", "мир", "Москва", "ЁЛКА", "съешь"],
    "ar": ["مرحبا", "العالم", "كتاب", "مُحَمَّد"],
    "he": ["שלום", "עולם", "בְּרֵאשִׁית"],
    "hi": ["नमस्ते", "दुनिया", "हिन्दी", "क्षत्रिय"],
    "th": ["สวัสดี", "ภาษาไทย", "กรุงเทพมหานคร", "น้ำ"],
    "zh": ["我们", "今天", "北京", "天安门", "语音识别", "模型", "你好世界", "粤语"],
    "ja": ["吾輩は猫である", "カタカナ", "ひらがな", "東京", "ｶﾀｶﾅ"],
    "ko": ["안녕하세요", "한국어", "공부", "감사합니다"],
    "vi": ["Tiếng", "Việt", "người", "đẹp"],
    "astral": ["𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀀𠀁", "𝐀𝐁𝐂", "𐍈", "𝒳", "𓀀"],
    "emoji": ["😀", "🎉", "👍🏽", "👨\u200d👩\u200d👧", "🇯🇵", "❤️", "🤖"],
}
DIGITS = ["0", "7", "42", "1234567890", "3.14159", "1,000", "-12", "١٢٣", "٤٥", "１２３", "²", "³", "½", "⅞",
          "Ⅻ", "ⅷ", "①", "⑳", "𝟙𝟚", "໓", "߃", "१२"]
PUNCT = [".", ",", "!", "?", ";", ":", "'", '"', "(", ")", "[", "]", "-", "--", "...", "…", "—", "/", "\\", "@",
         "#", "$", "%", "&", "*", "+", "=", "<", ">", "|", "~", "`", "^", "_", "{", "}", "。", "，", "、", "！",
         "？", "「", "」", "“", "”", "‘", "’", "«", "»", "¿", "¡", "·", "•", "€", "£", "¥", "©", "®", "™", "§"]
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n", "\n ", " \n\n ",
          "\xa0", "\u3000", "\u2028", "\u202f", "\x0b", "\x0c", "\x85", "\u2003", "\x1c", " \t "]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0323", "\u0338", "\u20dd", "\u0e49", "\u093f", "\u302a"]
DECOMPOSED = ["e\u0301", "A\u030a", "n\u0303", "o\u0308\u0304", "\u1100\u1161\u11a8", "\u304b\u3099", "\u212b",
              "\u2126", "\u212a", "ſ", "ﬁ", "Ǆ", "ǅ"]


def _contraction_cases() -> list[str]:
    out = []
    for suffix in CONTRACTIONS:
        variants = {""}
        for ch in suffix:
            variants = {v + c for v in variants for c in (ch.lower(), ch.upper())}
        for v in sorted(variants):
            out += [f"it'{v}", f"IT'{v}x", f"'{v}", f" '{v} ", f"x'{v}y", f"''{v}", f"'{v}'{v}", f"1'{v}"]
    out += ["it’s", "it's", "it'ſ", "'ſa", "x'ſ", "don't", "DON'T", "Don'T", "y'all'd've", "'", "''", "' s",
            "rock'n'roll", "O'Neil's", "l'été", "'Sa", "'LL", "'lL", "'Ll", "'RE'VE", "'9", "'é"]
    return out


def edge_cases() -> list[str]:
    cases = ["", " ", "a", "\n", "\r", "\t", "\xa0", "'", "0"]
    cases += _contraction_cases()
    # added tokens: alone, inside text, adjacent, and near misses
    for s in ADDED_SPELLINGS:
        cases += [s, f"a{s}b", f" {s} ", f"{s}{s}", f"x{s}\n"]
    cases += ["<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
              "<|audio_start|><|audio_pad|><|audio_pad|><|audio_end|>", "language English<asr_text>hi there",
              "<blank1><blank10><blank1>0<blank27>", "<tts_text_bos><tts_text_bos_single>",
              "<|im_end|>\u0338", "a<|im_start|>\u0338b", "<asr_text>\u0301"]
    cases += NEAR_MISSES + [f"x{s}y" for s in NEAR_MISSES]
    # lone \r, CRLF and other line breaks
    cases += ["a\rb", "\r\r", " \r ", "\r\n", "\n\r", "x \r\n y", "a\r\n\r\nb", "a \r", "\r\n  \r\n", "a\n\rb",
              "line1\nline2\r\nline3\rline4", "a\u2028b", "a\x85b", "a\x0bb", "a\x0cb"]
    # NBSP and other non-ASCII spaces
    cases += ["a\xa0b", " \xa0 ", "a \xa0b", "\xa0\xa0x", "a\u202fb", "\u3000\u3000x", "x\u3000", "a\u2003 b",
              "\xa0\n", "1\xa02"]
    # whitespace and newline runs
    for k in range(1, 7):
        cases += [" " * k + "x", "x" + " " * k, "x" + " " * k + "y", "\n" * k + "x", "x" + "\n" * k + "y",
                  "x" + " " * k + "\n" + " " * k + "y", "\t" * k + "x"]
    cases += ["a  \n\n  b", " \n \n ", "x\n \n y", "trailing   ", "   leading", "a\t \tb", "x \n", ".\n\n", "!  \n x"]
    # digits
    cases += ["1234567890", "3.14", "1,000,000", "a1b2c3", "x²y³", "½ cup", "Ⅻ ⅷ", "①②③", "𝟙𝟚𝟛", "١٢٣٤", "１２３",
              "2026-01-29 12:34:56", "$19.99", "1e10", "0x1F", "v1.2.3", "9'", "12'5", " 1", "  12"]
    # astral characters, emoji, combining marks and NFC
    cases += ["😀", "😀😀😀", "a😀b", " 😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🇯🇵🇫🇷", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝔴𝔬𝔯𝔡", "𠀀𠀁𠀂",
              "x𝐀y", "\U0001f600'", "'\U0001d400"]
    cases += ["\u0301", "a\u0301", " \u0301", "e\u0301\u0302", "\u0301\u0301x", "A\u030a", "\u212b", "\u1100\u1161",
              "\u1100\u1161\u11a8 \u1100", "Cafe\u0301", "5\u0301", "'\u0301s", "'s\u0301", ">\u0338", "=\u0338",
              "ﬁ", "ſ", "\u212a", "नमस्ते", "สวัสดี", "مُحَمَّد", "Tiếng Việt", "\u0e49\u0e49"]
    # control characters outside \s in the reference (U+001C..U+001F) and the like
    cases += ["a\x1cb", "\x1c\x1d\x1e\x1f", "a\x1f b", "\x00", "a\x00b", "\x7f", "\u200b", "a\u200db", "\ufeffx"]
    # characters assigned after the fast tokenizer's Unicode version (slow and fast may disagree)
    cases += ["\u0558", "a\u0558b", " \u0558", "\u0558'", "'\u0558s"]
    # long pieces (the BPE heap path)
    cases += ["a" * 200, "ab" * 100, "😀" * 60, "语音识别" * 50, " " * 100 + "x", "\n" * 100, "." * 150,
              "x" + "\u0301" * 80, "1" * 120, "Supercalifragilisticexpialidocious" * 4]
    return list(dict.fromkeys(cases))


def _pick(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(WORDS[rng.choice(sorted(WORDS))])
    if kind < 0.55:
        return rng.choice(DIGITS)
    if kind < 0.68:
        return rng.choice(PUNCT)
    if kind < 0.75:
        return rng.choice(DECOMPOSED)
    if kind < 0.79:
        return rng.choice(COMBINING)
    if kind < 0.84:
        return "'" + rng.choice(CONTRACTIONS + ["S", "T", "RE", "Ve", "mM", "LL", "D", "x", "ſ"])
    if kind < 0.86:
        return rng.choice(ADDED_SPELLINGS + NEAR_MISSES)
    if kind < 0.88:
        return chr(rng.randrange(0x21, 0x7F)) * rng.randint(1, 4)
    return rng.choice(SPACES)


def generated_corpus(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        text = ""
        for _ in range(rng.randint(1, 10)):
            text += _pick(rng)
            if rng.random() < 0.5:
                text += " "
        out.append(text)
    return out


def decode_input(rng: random.Random, ids: list[int], added_ids: list[int], byte_ids: list[int]) -> list[int]:
    """The ids to decode: the encode ids, sometimes cut or with added/byte tokens inserted."""
    out = list(ids)
    mode = rng.random()
    if mode < 0.25:
        for _ in range(rng.randint(1, 3)):
            out.insert(rng.randint(0, len(out)), rng.choice(added_ids))
    elif mode < 0.40 and len(out) > 1:
        out = out[rng.randint(0, 1) : len(out) - rng.randint(0, 1)]
    elif mode < 0.50 and out:
        a = rng.randrange(len(out))
        out = out[a : rng.randint(a, len(out))]
    elif mode < 0.60:
        out.insert(rng.randint(0, len(out)), rng.choice(byte_ids))
        out.insert(rng.randint(0, len(out)), rng.choice(added_ids))
    return out


# ------------------------------------------------------- observing the reference


def load_reference(directory: Path):
    import transformers
    from transformers import Qwen2Tokenizer, Qwen2TokenizerFast

    if transformers.__version__ != "4.57.6":
        sys.exit(f"oracle_tokenizer: needs transformers 4.57.6, found {transformers.__version__}")
    # No fix_mistral_regex: the standard Qwen2 split is the reference here.
    slow = Qwen2Tokenizer.from_pretrained(str(directory))
    fast = Qwen2TokenizerFast.from_pretrained(str(directory))
    pre = json.loads(fast.backend_tokenizer.to_str())["pre_tokenizer"]
    if pre["pretokenizers"][0]["pattern"]["Regex"] != QWEN2_PATTERN:
        sys.exit("oracle_tokenizer: the fast tokenizer does not use the standard Qwen2 split pattern")
    return slow, fast


def _has_added_spelling(text: str, spellings: list[str]) -> bool:
    return any(s in text for s in spellings)


def observe(slow, fast, text: str, decode_ids: list[int] | None, edge: bool, spellings: list[str]) -> dict:
    ids = slow.encode(text, add_special_tokens=False)
    record: dict = {"text": text, "ids": ids}
    fast_ids = fast.encode(text, add_special_tokens=False)
    if fast_ids != ids:
        record["fast_ids"] = fast_ids
    source = ids if decode_ids is None else decode_ids
    if decode_ids is not None and decode_ids != ids:
        record["decode_ids"] = decode_ids
    values = {
        "decoded": slow.decode(source, skip_special_tokens=False),
        "decoded_skip": slow.decode(source, skip_special_tokens=True),
        "fast_decoded": fast.decode(source, skip_special_tokens=False),
        "fast_decoded_skip": fast.decode(source, skip_special_tokens=True),
    }
    record["decoded"] = values["decoded"]
    if values["decoded_skip"] != values["decoded"]:
        record["decoded_skip"] = values["decoded_skip"]
    for key in ("fast_decoded", "fast_decoded_skip"):
        if values[key] != values[key.removeprefix("fast_")]:
            record[key] = values[key]
    if edge and not _has_added_spelling(text, spellings):
        pre = fast.backend_tokenizer.pre_tokenizer
        record["pieces"] = [p for p, _ in pre.pre_tokenize_str(unicodedata.normalize("NFC", text))]
    return record


def observe_all(slow, fast, corpus: list[tuple[str, list[int] | None]], n_edge: int) -> list[dict]:
    spellings = list(slow.get_added_vocab())
    return [observe(slow, fast, text, ids, i < n_edge, spellings) for i, (text, ids) in enumerate(corpus)]


def new_corpus(slow) -> tuple[list[tuple[str, list[int] | None]], int]:
    from transformers.models.qwen2.tokenization_qwen2 import bytes_to_unicode

    edges = edge_cases()
    rng = random.Random(SEED + 1)
    added_ids = sorted(slow.added_tokens_decoder)
    byte_ids = [slow.convert_tokens_to_ids(c) for b, c in bytes_to_unicode().items() if b >= 0x80]
    corpus: list[tuple[str, list[int] | None]] = []
    for text in edges + generated_corpus(SEED, N_GENERATED):
        ids = slow.encode(text, add_special_tokens=False)
        corpus.append((text, decode_input(rng, ids, added_ids, byte_ids)))
    return corpus, len(edges)


# ------------------------------------------------------------ the Unicode tables


def class_members(pattern: str) -> list[int]:
    """Code points the fast tokenizer's regex engine puts in a one-character class."""
    from tokenizers import Regex
    from tokenizers.pre_tokenizers import Split

    split = Split(Regex(pattern), behavior="removed")
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and not split.pre_tokenize_str(chr(c))]


def _ranges(points: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in points:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(a, b) for a, b in out]


def render_tables() -> str:
    import tokenizers

    lines = [
        '"""Unicode classes of the Qwen2 pre-tokenizer split (generated; do not edit).',
        "",
        "Generated by ``tools/oracles/qwen3/oracle_tokenizer.py --update`` from the regex",
        f"engine of the reference fast tokenizer (tokenizers {tokenizers.__version__}, Oniguruma), so that the split",
        "does not depend on the Unicode version of the running Python. Each table is a",
        "tuple of inclusive ``(first, last)`` code point ranges; the oracle checks them",
        "against the reference on every run.",
        '"""',
        "",
    ]
    for name, pattern in (("LETTER_RANGES", r"\p{L}"), ("NUMBER_RANGES", r"\p{N}"), ("SPACE_RANGES", r"\s")):
        ranges = _ranges(class_members(pattern))
        lines.append(f"# {pattern}: {sum(b - a + 1 for a, b in ranges)} code points")
        lines.append(f"{name} = (")
        for start in range(0, len(ranges), 5):
            lines.append("    " + " ".join(f"(0x{a:X}, 0x{b:X})," for a, b in ranges[start : start + 5]))
        lines += [")", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ the driver


def write_observations(path: Path, records: list[dict], n_edge: int, generator: str) -> None:
    head = {
        "generator": generator,
        "format": __doc__.split("The fixture holds", 1)[1].strip(),
        "n_edge_cases": n_edge,
        "n_generated": len(records) - n_edge,
        "seed": SEED,
    }
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    body = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body + ',\n "records": [\n' + ",\n".join(lines) + "\n ]\n}\n", encoding="utf-8")


def differences(want: list[dict], got: list[dict]) -> list[str]:
    if len(want) != len(got):
        return [f"{len(got)} records observed, fixture has {len(want)}"]
    out = []
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if w != g:
            keys = sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k))
            out.append(f"record {i} {w['text'][:40]!r}: {', '.join(keys)} differ")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="observations go to OUT/tokenizer/")
    parser.add_argument("--update", action="store_true", help="regenerate the corpus, fixture and tables")
    args = parser.parse_args()
    import tokenizers
    import transformers

    generator = (f"transformers {transformers.__version__} / tokenizers {tokenizers.__version__}: Qwen2Tokenizer "
                 "(slow) and Qwen2TokenizerFast on shared/data/tokenizer, standard Qwen2 split (no fix_mistral_regex)")
    slow, fast = load_reference(shared_tokenizer_dir())
    if args.update:
        corpus, n_edge = new_corpus(slow)
    else:
        fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
        n_edge = fixture["n_edge_cases"]
        corpus = [(r["text"], r.get("decode_ids", r["ids"])) for r in fixture["records"]]
    records = observe_all(slow, fast, corpus, n_edge)
    out = args.out / "tokenizer"
    write_observations(out / "observations.json", records, n_edge, generator)
    tables = render_tables()
    (out / "_unicode_tables.py").write_text(tables, encoding="utf-8")
    n_slow_fast = sum("fast_ids" in r for r in records)
    print(f"tokenizer: {len(records)} strings ({n_edge} edge cases), slow/fast encode differ on {n_slow_fast}; "
          f"written to {out}")
    if args.update:
        write_observations(FIXTURE, records, n_edge, generator)
        TABLES.write_text(tables, encoding="utf-8")
        print(f"updated {FIXTURE} and {TABLES}")
        return 0
    drift = differences(fixture["records"], records)
    # compare the ranges, not the docstring (which names the tokenizers version)
    if tables.split('"""', 2)[2] != TABLES.read_text(encoding="utf-8").split('"""', 2)[2]:
        drift.append(f"Unicode class tables differ from {TABLES}")
    for line in drift[:20]:
        print("DRIFT", line, file=sys.stderr)
    if drift:
        print(f"tokenizer: {len(drift)} drifted observations; rerun with --update only if the reference "
              "really changed", file=sys.stderr)
        return 1
    print("tokenizer: no drift from the committed fixture and tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
