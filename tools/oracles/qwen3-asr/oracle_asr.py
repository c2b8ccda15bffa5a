"""Reference observations of Qwen3-ASR (qwen-asr 0.0.6) on a seeded random checkpoint.

Run with the reference environment (torch, transformers 4.57.6, qwen-asr 0.0.6 and
``onespeech-tools`` installed there)::

    <reference-env>/bin/python tools/oracles/qwen3-asr/oracle_asr.py --out build/oracle
    <reference-env>/bin/python tools/oracles/qwen3-asr/oracle_asr.py --out build/oracle --size 0.6b

It generates the checkpoint (deterministic: same seed, same bytes; digests
recorded), loads it with ``Qwen3ASRModel.from_pretrained`` (transformers backend,
float32, CPU, the default attention implementation), and for each case records
through public module hooks: the PCM fed, the input features, the audio-tower
output (after the projector), the prompt ids, the first-step logits and the
greedy ids. A second pass per long case applies the reference's own 104-token
block-diagonal encoder mask (the one FlashAttention-2 uses) through a forward
pre-hook on every encoder layer. The file format is in README.md beside this
script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tools/ (onespeech_tools) when not installed

from onespeech_tools.checkpoints import make_checkpoint  # noqa: E402
from onespeech_tools.data import shared_data_or_skip  # noqa: E402

FORMAT_VERSION = 2  # 2: per-step top-2 ids, margin and max |score| of every greedy run
SAMPLE_RATE = 16000
TOP_K = 8


@dataclass(frozen=True)
class Case:
    name: str
    audio: str  # file in shared/data/audio
    language: str | None  # forced language name, None = the model decides
    context: str


CASES = (
    Case("librispeech_auto", "librispeech_test-clean_1995-1837-0001.wav", None, ""),
    Case("jfk_english_forced", "jfk.flac", "English", ""),
    Case("aishell_context_auto", "aishell1_BAC009S0724W0121.wav", None, "会议记录：房地产市场调控"),
    Case("de_context_forced", "picovoice_test_de.wav", "German", "Wetterbericht für Berlin"),
    Case("ja_auto", "picovoice_test_ja.wav", None, ""),
    Case("es_forced", "picovoice_test_es.wav", "Spanish", ""),
    Case("ko_context_auto", "picovoice_test_ko.wav", None, "Names: Picovoice, Leopard, Cheetah"),
    Case("multilingual_60s_auto", "multilingual_en_de.mp3", None, ""),
)


def load_pcm(path: Path) -> np.ndarray:
    """16 kHz mono float32: soundfile decode, channel mean, soxr HQ (as onespeech.features)."""
    frames, rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = frames.mean(axis=1, dtype=np.float32)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A copy as numpy; bfloat16 (which numpy lacks) widened exactly to float32."""
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy().copy()


class Recorder:
    """Forward hooks on the thinker, the audio tower and the output head."""

    def __init__(self, thinker: torch.nn.Module) -> None:
        self.thinker = thinker
        self.reset()
        self.handles = [
            thinker.register_forward_pre_hook(self._thinker_pre, with_kwargs=True),
            thinker.audio_tower.register_forward_hook(self._audio_out),
            thinker.lm_head.register_forward_hook(self._head_out),
        ]

    def reset(self) -> None:
        self.prefill: dict[str, np.ndarray] | None = None
        self.encoder: list[np.ndarray] = []
        self.step_logits: list[torch.Tensor] = []

    def _thinker_pre(self, module, args, kwargs):
        if self.prefill is None:
            self.prefill = {
                key: _numpy(kwargs[key])
                for key in ("input_ids", "attention_mask", "input_features", "feature_attention_mask")
                if kwargs.get(key) is not None
            }

    def _audio_out(self, module, args, output):
        self.encoder.append(_numpy(output.last_hidden_state))

    def _head_out(self, module, args, output):
        # prefill computes the head for every prompt position; the next token uses the last
        self.step_logits.append(output[0, -1].detach().float().clone())

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class WindowedEncoder:
    """Apply the reference's block-diagonal encoder mask on CPU.

    Under FlashAttention-2 the audio tower attends within ``cu_seqlens`` windows
    (``n_window_infer // (2 * n_window)`` convolution chunks = 8 x 13 = 104
    tokens); on CPU it passes no mask and attends over the whole input. The
    tower's own ``_prepare_attention_mask`` builds the equivalent additive mask
    from the same ``cu_seqlens`` for non-FA2 backends, and a forward pre-hook
    hands it to every encoder layer.
    """

    def __init__(self, audio_tower: torch.nn.Module) -> None:
        self.tower = audio_tower
        self.cu_seqlens: list[list[int]] = []
        self.handles = [layer.register_forward_pre_hook(self._pre, with_kwargs=True) for layer in audio_tower.layers]

    def _pre(self, module, args, kwargs):
        hidden_states, cu_seqlens = args[0], args[1]
        if module is self.tower.layers[0]:
            self.cu_seqlens.append(cu_seqlens.tolist())
        kwargs = dict(kwargs)
        kwargs["attention_mask"] = self.tower._prepare_attention_mask(hidden_states, cu_seqlens)
        return args, kwargs

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class StepScores:
    """A logits processor that records, at every step, what greedy chose between.

    It runs after generate's own processors (transformers appends the caller's), so
    it sees the scores argmax sees: with ``min_new_tokens`` the end ids are already
    -inf. Per step it keeps the top-2 ids, their margin (top1 - top2) and the largest
    finite absolute score: the near-tie rule's inputs (``onespeech_tools.near_ties``).
    It changes nothing.
    """

    def __init__(self) -> None:
        self.top2: list[list[int]] = []
        self.margin: list[float] = []
        self.max_abs: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        row = scores[0].detach().double()
        first = int(row.argmax())  # greedy's choice (the first index of an exact tie)
        rest = row.clone()
        rest[first] = -torch.inf
        second = int(rest.argmax())
        self.top2.append([first, second])
        self.margin.append(float(row[first] - row[second]))
        self.max_abs.append(float(row[torch.isfinite(row)].abs().max()))
        return scores

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}step_top2_ids": np.asarray(self.top2, dtype=np.int64).reshape(-1, 2),
            f"{prefix}step_margin": np.asarray(self.margin, dtype=np.float64),
            f"{prefix}step_max_abs": np.asarray(self.max_abs, dtype=np.float64),
        }


class TeacherForcing:
    """A logits processor that records the model's argmax, then forces the given id.

    With the FP32 reference's greedy ids forced, step t's argmax is this run's
    choice after the same prefix: a per-token agreement count that a single
    near-tie cannot cut short, unlike the common prefix of two free runs.
    """

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.argmax: list[int] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.argmax.append(int(scores[0].argmax()))
        forced = torch.full_like(scores, -torch.inf)
        forced[0, self.ids[len(self.argmax) - 1]] = 0.0
        return forced


def run_case(
    asr, case: Case, pcm: np.ndarray, steps: int, windowed: bool, forced_ids: list[int] | None = None,
    free_steps: int | None = None,
) -> tuple[dict, dict]:
    """One case's observations; ``free_steps`` (default ``steps``) bounds the free greedy run."""
    from qwen_asr.inference.utils import (
        MAX_ASR_INPUT_SECONDS,
        normalize_audio_input,
        split_audio_into_chunks,
    )

    fed = normalize_audio_input((pcm, SAMPLE_RATE))
    reference_chunks = split_audio_into_chunks(fed, SAMPLE_RATE, MAX_ASR_INPUT_SECONDS)
    prompt = asr._build_text_prompt(context=case.context, force_language=case.language)
    inputs = asr.processor(text=[prompt], audio=[fed], return_tensors="pt", padding=True)
    inputs = inputs.to(asr.model.device).to(asr.model.dtype)
    model = asr.model
    thinker = model.thinker
    eos_ids = [151645, 151643]

    free_steps = steps if free_steps is None else free_steps

    def generate(min_new_tokens: int | None, scores: StepScores) -> tuple[Recorder, list[int], float]:
        recorder = Recorder(thinker)
        extra = {"min_new_tokens": min_new_tokens} if min_new_tokens else {}
        start = time.perf_counter()
        try:
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=free_steps, logits_processor=[scores], **extra)
        finally:
            recorder.close()
        seconds = time.perf_counter() - start
        ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
        assert [pair[0] for pair in scores.top2] == ids, "greedy did not take the recorded top-1"
        return recorder, ids, seconds

    scores = StepScores()
    rec, tokens, seconds = generate(None, scores)
    logits = torch.stack(rec.step_logits[: len(tokens)])
    top = logits.topk(TOP_K, dim=-1)
    scale = logits.abs().amax(dim=-1)
    margins = ((top.values[:, 0] - top.values[:, 1]) / scale).numpy()
    arrays = {
        "pcm": fed.astype(np.float32),
        "input_features": rec.prefill["input_features"][0].astype(np.float32),
        "feature_attention_mask": rec.prefill["feature_attention_mask"][0].astype(np.int64),
        "encoder_output": rec.encoder[0].astype(np.float32),
        "prompt_ids": rec.prefill["input_ids"][0].astype(np.int64),
        "first_logits": rec.step_logits[0].numpy().astype(np.float32),
        "tokens": np.asarray(tokens, dtype=np.int64),
        "step_top_ids": top.indices.numpy().astype(np.int64),
        "step_top_values": top.values.numpy().astype(np.float32),
        **scores.arrays(""),
    }
    eos_step = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    info = {
        "name": case.name,
        "audio": case.audio,
        "language": case.language,
        "context": case.context,
        "prompt_text": prompt,
        "n_samples": int(fed.shape[0]),
        "n_frames": int(arrays["input_features"].shape[-1]),
        "n_audio_tokens": int(arrays["encoder_output"].shape[0]),
        "reference_chunks": len(reference_chunks),
        "prompt_ids": arrays["prompt_ids"].tolist(),
        "tokens": tokens,
        "eos_step": eos_step,
        "text": asr.processor.batch_decode([tokens], skip_special_tokens=True, clean_up_tokenization_spaces=False)[0],
        "distinct_tokens": len(set(tokens)),
        "min_relative_margin": float(margins.min()),
        "median_relative_margin": float(np.median(margins)),
        "seconds_generate": round(seconds, 3),
    }
    if len(tokens) < free_steps:
        # EOS came early: a second run with EOS masked until `steps` tokens exist
        scores_min_new = StepScores()
        rec2, tokens2, _ = generate(free_steps, scores_min_new)
        arrays["tokens_min_new"] = np.asarray(tokens2, dtype=np.int64)
        arrays.update(scores_min_new.arrays("min_new_"))
        info["tokens_min_new"] = tokens2
    if forced_ids:
        forcing = TeacherForcing(forced_ids)
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=len(forced_ids), logits_processor=[forcing])
        arrays["forced_ids"] = np.asarray(forced_ids, dtype=np.int64)
        arrays["forced_argmax"] = np.asarray(forcing.argmax, dtype=np.int64)
        info["forced_agree"] = int(np.sum(arrays["forced_ids"] == arrays["forced_argmax"]))
    if windowed:
        window = WindowedEncoder(thinker.audio_tower)
        scores_w = StepScores()
        try:
            recw, tokens_w, seconds_w = generate(None, scores_w)
        finally:
            window.close()
        arrays.update(scores_w.arrays("windowed_"))
        arrays["windowed_encoder_output"] = recw.encoder[0].astype(np.float32)
        arrays["windowed_first_logits"] = recw.step_logits[0].numpy().astype(np.float32)
        arrays["windowed_tokens"] = np.asarray(tokens_w, dtype=np.int64)
        info["windowed_cu_seqlens"] = window.cu_seqlens[0]
        info["windowed_tokens"] = tokens_w
        info["seconds_generate_windowed"] = round(seconds_w, 3)
    return info, arrays


# the folder suffix of each reduced-precision reference
SUFFIX = {"bfloat16": "bf16", "int8": "int8"}


def quantize_linears(model: torch.nn.Module) -> None:
    """Every nn.Linear (the output head included) under torch's dynamic int8 quantization, in place.

    ``quantize_dynamic``'s default: int8 weights per tensor, activations quantized
    per tensor at each call (uint8, reduced range), int32 sums; the convolutions and
    embeddings stay float32.
    """
    from torch.ao.quantization import quantize_dynamic

    quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


def check_head(asr, ckpt_dir: Path) -> dict:
    """Which stored matrix the loaded reference uses as output head."""
    from safetensors import safe_open

    thinker = asr.model.thinker
    head = thinker.lm_head.weight.float()
    names = set()
    stored = {}
    for path in sorted(ckpt_dir.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            for key in handle.keys():
                names.add(key)
                if key in ("thinker.lm_head.weight", "thinker.model.embed_tokens.weight"):
                    stored[key] = handle.get_tensor(key).float()
    reference_names = set(asr.model.state_dict())
    return {
        "head_equals_stored_embed_tokens": bool(torch.equal(head, stored["thinker.model.embed_tokens.weight"])),
        "head_equals_stored_lm_head": bool(torch.equal(head, stored["thinker.lm_head.weight"])),
        "head_shares_embedding_parameter": thinker.lm_head.weight.data_ptr()
        == thinker.model.embed_tokens.weight.data_ptr(),
        "checkpoint_names_equal_reference_state_dict": names == reference_names,
        "n_tensors": len(names),
        "n_parameters": int(sum(p.numel() for p in asr.model.state_dict().values())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="observations folder (writes OUT/asr/<size>/)")
    parser.add_argument("--size", choices=("tiny", "0.6b", "1.7b"), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=64, help="greedy steps recorded per case")
    parser.add_argument("--checkpoint", type=Path, help="reuse this generated checkpoint (default: OUT/asr/<size>/ckpt)")
    parser.add_argument("--cases", nargs="*", help="run only these case names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16", "int8"), default="float32",
        help="reference compute dtype; bfloat16 writes OUT/asr/<size>-bf16/ (issue 5 comparisons); int8 runs the "
             "float32 model with every nn.Linear under torch's dynamic int8 quantization and writes OUT/asr/<size>-int8/",
    )
    args = parser.parse_args()

    audio_dir = shared_data_or_skip("oracle_asr") / "audio"
    from qwen_asr import Qwen3ASRModel

    torch.set_num_threads(args.threads)
    dtype = torch.float32 if args.dtype == "int8" else getattr(torch, args.dtype)
    out = args.out / "asr" / (args.size if args.dtype == "float32" else f"{args.size}-{SUFFIX[args.dtype]}")
    out.mkdir(parents=True, exist_ok=True)
    fp32_dir = args.out / "asr" / args.size
    ckpt = args.checkpoint or out / "ckpt"
    start = time.perf_counter()
    if args.checkpoint is None:
        make_checkpoint(ckpt, args.size, seed=args.seed, kind="asr")
    seconds_generate_ckpt = time.perf_counter() - start
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in sorted(ckpt.iterdir()) if p.is_file()}

    start = time.perf_counter()
    asr = Qwen3ASRModel.from_pretrained(str(ckpt), dtype=dtype, device_map="cpu", max_new_tokens=args.steps)
    seconds_load = time.perf_counter() - start
    asr.model.eval()
    head = check_head(asr, ckpt)
    if args.dtype == "int8":
        quantize_linears(asr.model)
    window_frames = asr.model.thinker.audio_tower.n_window_infer

    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    index = []
    for case in cases:
        pcm = load_pcm(audio_dir / case.audio)
        start = time.perf_counter()
        # windows only differ from full attention beyond n_window_infer mel frames (8 s)
        windowed = pcm.shape[0] // 160 > window_frames
        forced_ids = None
        if args.dtype != "float32" and (fp32_dir / f"{case.name}.npz").exists():
            # the FP32 reference's greedy ids, forced step by step (issue 5's agreement count)
            with np.load(fp32_dir / f"{case.name}.npz") as fp32:
                forced_ids = [int(t) for t in fp32["tokens"]]
        # the BF16 and INT8 comparisons use full attention only: no windowed rerun. The INT8
        # criterion needs only the teacher-forced run and the first step (its logits and the
        # encoder output): its free greedy run stops there, which halves the oracle's time
        free_steps = 1 if args.dtype == "int8" and forced_ids else args.steps
        info, arrays = run_case(asr, case, pcm, args.steps, windowed=windowed and args.dtype == "float32",
                                forced_ids=forced_ids, free_steps=free_steps)  # fmt: skip
        info["seconds_case"] = round(time.perf_counter() - start, 3)
        np.savez(out / f"{case.name}.npz", **arrays)
        index.append(info)
        print(
            f"{case.name}: {info['n_samples']} samples, {info['n_audio_tokens']} audio tokens, "
            f"{len(info['tokens'])} tokens ({info['distinct_tokens']} distinct), "
            f"min margin {info['min_relative_margin']:.1e}, {info['seconds_case']:.1f} s",
            flush=True,
        )

    import qwen_asr
    import transformers

    audio_attn = asr.model.thinker.audio_tower.config._attn_implementation
    summary = {
        "format_version": FORMAT_VERSION,
        "size": args.size,
        "dtype": args.dtype,
        "seed": args.seed,
        "steps": args.steps,
        "checkpoint": {"path": str(ckpt), "files": files},
        "output_head": head,
        "attn_implementation": {
            "audio_tower": audio_attn,
            "text": asr.model.thinker.model.config._attn_implementation,
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "qwen_asr": getattr(qwen_asr, "__version__", "0.0.6"),
            "python": platform.python_version(),
        },
        "threads": args.threads,
        "seconds": {"checkpoint": round(seconds_generate_ckpt, 3), "load": round(seconds_load, 3)},
        "cases": index,
    }
    (out / "cases.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"observations in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
