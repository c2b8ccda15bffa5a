"""Reference observations for onespeech-align: ``oracle_aligner.py --out DIR [--size tiny|0.6b]``.

Runs the reference toolkit (qwen-asr 0.0.6, transformers 4.57.6, CPU torch) and writes
to ``DIR/aligner/``:

- ``units.json``: the reference's own whitespace-language unit splitting
  (``Qwen3ForceAlignProcessor.tokenize_space_lang``) over the committed synthetic
  corpus ``aligner_units_corpus.json``.
- ``unit_ids.json``: the ids the reference processor's tokenizer gives each of those units.
- ``<size>/checkpoint/``: a random aligner checkpoint in the publisher's layout
  (classify head 5000, tie_word_embeddings false), generated deterministically by
  ``onespeech_tools.checkpoints.make_checkpoint(..., kind="aligner")``.
- ``<size>/cases.json`` and ``<size>/<case>.npz``: for each case (English, Chinese,
  Japanese and mixed-punctuation texts over real clips) the PCM fed to the model, the
  reference's unit list, the input ids, the raw class logits at the ``<timestamp>``
  positions and their argmax slots, captured by a forward hook on ``lm_head`` *before*
  the toolkit's post-processing (its monotonic ``fix_timestamp``), per slot the argmax
  and runner-up class, their margin and the largest |logit| (``slot_top2_ids``,
  ``slot_margin``, ``slot_max_abs``: the near-tie rule's inputs), plus the
  post-processed times for information.

With ``--int8`` the same cases run on the same checkpoint with every nn.Linear under torch's
dynamic int8 quantization (``quantize_dynamic``, the head included) and go to
``<size>-int8/`` (issue 38's INT8 criterion: slot agreement with the FP32 run).

Run it with the reference interpreter (the reference environment's ``python``) or ``tox -e oracle``.
The full-size shape (``--size 0.6b``) needs several GiB: run it under the machine lock,
e.g. ``python oracle_aligner.py --out build/oracle --size 0.6b
--checkpoint <checkpoints>/aligner-0.6b``. ``<size>/checkpoint.txt`` names the
checkpoint folder the observations belong to.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.data import shared_data_or_skip  # noqa: E402

CORPUS = HERE / "aligner_units_corpus.json"
SEED = {"tiny": 20260601, "0.6b": 20260602}
SAMPLE_RATE = 16000


# (name, clip, language tag, reference language name, text); text None = the clip's
# transcript from the manifest. The mixed-punctuation text exercises cleaning.
CASES = [
    ("en_jfk", "jfk.flac", "en", "English", None),
    ("en_mixed_punct", "picovoice_test.wav", "en", "English",
     "Mr. Quilter -- is the \u201capostle\u201d of the middle-classes; and we're glad (very!) "
     "to welcome his gospel... 100% of it, O'Brien\u2019s."),
    ("zh_aishell_0724", "aishell1_BAC009S0724W0121.wav", "zh", "Chinese", None),
    ("zh_aishell_0764", "aishell1_BAC009S0764W0121.wav", "zh", "Chinese", None),
    ("ja_picovoice", "picovoice_test_ja.wav", "ja", "Japanese", None),
]


def write_units(out: Path) -> None:
    from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForceAlignProcessor

    processor = Qwen3ForceAlignProcessor()
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    observed = {
        lang: [{"text": t, "units": processor.tokenize_space_lang(t)} for t in corpus[lang]]
        for lang in ("en", "zh")
    }
    (out / "units.json").write_text(json.dumps(observed, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"units: {sum(len(v) for v in observed.values())} texts")


def write_unit_ids(out: Path, tokenizer) -> None:
    """Ids the reference's processor tokenizer (fix_mistral_regex=True) gives each corpus unit."""
    units = json.loads((out / "units.json").read_text(encoding="utf-8"))
    seen = sorted({u for lang in units.values() for case in lang for u in case["units"]})
    ids = {u: tokenizer(u, add_special_tokens=False)["input_ids"] for u in seen}
    (out / "unit_ids.json").write_text(json.dumps(ids, ensure_ascii=False, indent=0), encoding="utf-8")
    print(f"unit ids: {len(ids)} units")


def load_pcm(path: Path) -> np.ndarray:
    """16 kHz mono float32 in [-1, 1] (librosa's soxr_hq resampler for other rates)."""
    import librosa
    import soundfile as sf

    audio, sr = sf.read(str(path), dtype="float32", always_2d=True)
    audio = audio.mean(axis=1).astype(np.float32)
    if sr != SAMPLE_RATE:
        audio = librosa.resample(audio, orig_sr=sr, target_sr=SAMPLE_RATE).astype(np.float32)
    # the reference rescales audio whose peak exceeds 1; keep both sides identical
    peak = float(np.abs(audio).max())
    if peak > 1.0:
        audio = (audio / peak).astype(np.float32)
    return audio


def slot_near_ties(logits: np.ndarray) -> dict[str, np.ndarray]:
    """Per timestamp slot: the argmax and runner-up class, their margin, the largest |logit|.

    The near-tie rule's inputs (``onespeech_tools.near_ties``), per slot as each slot's
    class is its own argmax.
    """
    wide = logits.astype(np.float64)
    rows = np.arange(wide.shape[0])
    first = wide.argmax(axis=-1)
    rest = wide.copy()
    rest[rows, first] = -np.inf
    second = rest.argmax(axis=-1)
    return {
        "slot_top2_ids": np.stack([first, second], axis=-1).astype(np.int64),
        "slot_margin": wide[rows, first] - wide[rows, second],
        "slot_max_abs": np.abs(wide).max(axis=-1),
    }


def make_checkpoint(directory: Path, size: str) -> None:
    from onespeech_tools.checkpoints import make_checkpoint as generate

    if (directory / "config.json").is_file():
        return
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    generate(staging, size, SEED[size], kind="aligner")
    staging.rename(directory)


def run_cases(out: Path, size: str, checkpoint: Path | None = None, int8: bool = False) -> None:
    import torch
    from qwen_asr import Qwen3ForcedAligner

    torch.manual_seed(0)
    data = shared_data_or_skip("oracle_aligner")
    manifest = {c["file"]: c for c in json.loads((data / "audio" / "manifest.json").read_text())["clips"]}
    size_dir = out / (f"{size}-int8" if int8 else size)
    size_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint or out / size / "checkpoint"
    make_checkpoint(checkpoint, size)

    aligner = Qwen3ForcedAligner.from_pretrained(str(checkpoint), dtype=torch.float32, device_map="cpu")
    if int8:  # before the hooks: the quantized head is a new module
        from torch.ao.quantization import quantize_dynamic

        quantize_dynamic(aligner.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    thinker = aligner.model.thinker
    captured: dict[str, torch.Tensor] = {}

    # input ids reach the thinker as a keyword; logits leave lm_head before any post-processing
    def grab_inputs(_module, args, kwargs):
        captured["input_ids"] = kwargs["input_ids"].detach().clone()
        captured["input_features"] = kwargs["input_features"].detach().clone()

    def grab_logits(_module, _inputs, output):
        captured["logits"] = output.detach().clone()

    def grab_audio(_module, _inputs, output):
        captured["audio_features"] = output.last_hidden_state.detach().clone()

    def grab_hidden(_module, _inputs, output):
        captured["hidden"] = output.detach().clone()

    thinker.register_forward_pre_hook(grab_inputs, with_kwargs=True)
    thinker.lm_head.register_forward_hook(grab_logits)
    # stage outputs, to tell encoder from decoder differences when parity fails
    thinker.audio_tower.register_forward_hook(grab_audio)
    thinker.model.norm.register_forward_hook(grab_hidden)

    write_unit_ids(out, aligner.processor.tokenizer)
    index = []
    for name, clip, tag, language, text in CASES:
        text = manifest[clip]["transcript"] if text is None else text
        pcm = load_pcm(data / "audio" / clip)
        words, _ = aligner.aligner_processor.encode_timestamp(text, language)
        result = aligner.align(audio=(pcm, SAMPLE_RATE), text=text, language=language)[0]
        ids = captured["input_ids"][0].numpy()
        logits = captured["logits"][0].float().numpy()
        positions = np.flatnonzero(ids == aligner.timestamp_token_id)
        ts_logits = logits[positions]
        slots = ts_logits.argmax(axis=-1)
        top2 = np.sort(ts_logits, axis=-1)[:, -2:]
        margin = (top2[:, 1] - top2[:, 0]) / np.abs(ts_logits).max()
        ties = slot_near_ties(ts_logits)
        np.savez(
            size_dir / f"{name}.npz",
            pcm=pcm,
            input_ids=ids.astype(np.int64),
            input_features=captured["input_features"][0].float().numpy(),
            audio_features=captured["audio_features"].float().numpy(),
            timestamp_hidden=captured["hidden"][0, positions].float().numpy(),
            timestamp_positions=positions.astype(np.int64),
            timestamp_logits=ts_logits.astype(np.float32),
            slots=slots.astype(np.int64),
            **ties,
        )
        index.append({
            "name": name, "clip": clip, "language": tag, "reference_language": language,
            "text": text, "units": words,
            "postprocessed": [[it.text, it.start_time, it.end_time] for it in result],
            "min_relative_margin": float(margin.min()),
            "distinct_slots": int(len(set(slots.tolist()))),
        })
        print(f"{size} {name}: {len(words)} units, {len(ids)} ids, "
              f"{len(set(slots.tolist()))} distinct slots, min margin {margin.min():.2e}")
    (size_dir / "checkpoint.txt").write_text(str(checkpoint.resolve()), encoding="utf-8")
    (size_dir / "cases.json").write_text(json.dumps(index, ensure_ascii=False, indent=1), encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--size", default="tiny", choices=sorted(SEED))
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="checkpoint folder to use (generated there if missing); default DIR/aligner/<size>/checkpoint")
    parser.add_argument("--units-only", action="store_true", help="only the unit-splitting observations")
    parser.add_argument("--int8", action="store_true",
                        help="every nn.Linear under torch's dynamic int8 quantization; writes DIR/aligner/<size>-int8/")
    args = parser.parse_args()
    out = args.out / "aligner"
    out.mkdir(parents=True, exist_ok=True)
    write_units(out)
    if not args.units_only:
        run_cases(out, args.size, args.checkpoint, args.int8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
