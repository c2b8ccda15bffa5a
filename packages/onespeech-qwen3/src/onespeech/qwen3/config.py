"""Typed view of a Qwen3-ASR / Qwen3-ForcedAligner ``config.json``.

The publisher's config nests the model under ``thinker_config`` with an
``audio_config`` (the AuT encoder) and a ``text_config`` (the Qwen3 decoder);
token ids, the supported languages and, for the forced aligner, the timestamp
head live beside them. Only the fields our runtime uses are read, each checked
for type and range, and a missing or wrong field raises :class:`ConfigError`
naming its path (e.g. ``thinker_config.text_config.head_dim``).

Output head: with ``tie_word_embeddings`` true (the ASR models) the reference
ties ``lm_head`` to ``embed_tokens`` when it loads, so the stored ``lm_head``
matrix is ignored and the token embedding is the head (docs/checkpoints.md).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onespeech.kernels.jsonfile import loads_json
from onespeech.qwen3.errors import ConfigError

__all__ = [
    "ASR_MODEL_TYPE",
    "ALIGNER_MODEL_TYPE",
    "AudioEncoderConfig",
    "ConfigError",
    "Qwen3Config",
    "TextDecoderConfig",
    "load_config",
    "parse_config",
]

#: ``model_type`` in the config.json of Qwen3-ASR checkpoints.
ASR_MODEL_TYPE = "qwen3_asr"
#: ``model_type`` in the config.json of Qwen3-ForcedAligner checkpoints.
ALIGNER_MODEL_TYPE = "qwen3_forced_aligner"
EMBED_NAME = "thinker.model.embed_tokens.weight"
LM_HEAD_NAME = "thinker.lm_head.weight"
# generation_config.json of the ASR models: <|endoftext|>, <|im_end|>
DEFAULT_EOS_TOKEN_IDS = (151643, 151645)
# values beyond these pass as numbers but break the arithmetic (the released configs: 1e-6, 1e6)
MAX_RMS_NORM_EPS = 1.0
MAX_ROPE_THETA = 1e12
_FLOAT32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class AudioEncoderConfig:
    """The AuT audio encoder (``thinker_config.audio_config``)."""

    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    num_mel_bins: int
    downsample_hidden_size: int
    output_dim: int
    n_window: int  # half the convolution chunk: chunks are 2 * n_window mel frames
    n_window_infer: int  # mel frames per attention window under FlashAttention-2
    conv_chunksize: int
    max_source_positions: int
    activation: str

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def conv_out_features(self) -> int:
        """Input width of ``conv_out``: channels x mel bins after three stride-2 convolutions."""
        freq = self.num_mel_bins
        for _ in range(3):
            freq = (freq + 1) // 2
        return self.downsample_hidden_size * freq


@dataclass(frozen=True)
class TextDecoderConfig:
    """The Qwen3 decoder (``thinker_config.text_config``)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, ...]
    mrope_interleaved: bool
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str


@dataclass(frozen=True)
class Qwen3Config:
    """A parsed ``config.json`` (plus ``generation_config.json`` when present)."""

    model_type: str
    audio: AudioEncoderConfig
    text: TextDecoderConfig
    audio_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    support_languages: tuple[str, ...]
    eos_token_ids: tuple[int, ...]
    # forced aligner only
    classify_num: int | None = None
    timestamp_token_id: int | None = None
    timestamp_segment_time_ms: int | None = None

    @property
    def is_aligner(self) -> bool:
        return self.model_type == ALIGNER_MODEL_TYPE

    @property
    def output_head_name(self) -> str:
        """The publisher tensor the reference uses as output head (see module docstring)."""
        return EMBED_NAME if self.text.tie_word_embeddings else LM_HEAD_NAME

    @property
    def output_rows(self) -> int:
        """Rows of the output head: vocabulary (ASR) or timestamp classes (aligner)."""
        return self.classify_num if self.classify_num is not None else self.text.vocab_size


class _Reader:
    """Typed field access that names the JSON path on error."""

    def __init__(self, data: Any, path: str, source: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: {path or 'top level'} must be a JSON object")
        self.data, self.path, self.source = data, path, source

    def _where(self, key: str) -> str:
        return f"{self.source}: {self.path + '.' if self.path else ''}{key}"

    def sub(self, key: str) -> _Reader:
        if key not in self.data:
            raise ConfigError(f"{self._where(key)} is missing")
        return _Reader(self.data[key], f"{self.path + '.' if self.path else ''}{key}", self.source)

    def integer(self, key: str, *, minimum: int = 1, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise ConfigError(f"{self._where(key)} is missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"{self._where(key)} must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, key: str, *, above: float = 0.0, at_most: float = _FLOAT32_MAX) -> float:
        """A finite number in (above, at_most]: values beyond break float32 arithmetic."""
        value = self.data.get(key)
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
            or not above < value <= at_most
        ):
            raise ConfigError(f"{self._where(key)} must be a finite number in ({above:g}, {at_most:g}], got {value!r}")
        return float(value)

    def string(self, key: str, *, allowed: tuple[str, ...] | None = None, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{self._where(key)} must be a string, got {value!r}")
        if allowed is not None and value not in allowed:
            raise ConfigError(f"{self._where(key)} is {value!r}; allowed: {', '.join(allowed)}")
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self._where(key)} must be true or false, got {value!r}")
        return value


def _audio(r: _Reader) -> AudioEncoderConfig:
    config = AudioEncoderConfig(
        d_model=r.integer("d_model"),
        num_layers=r.integer("encoder_layers"),
        num_heads=r.integer("encoder_attention_heads"),
        ffn_dim=r.integer("encoder_ffn_dim"),
        num_mel_bins=r.integer("num_mel_bins"),
        downsample_hidden_size=r.integer("downsample_hidden_size"),
        output_dim=r.integer("output_dim"),
        n_window=r.integer("n_window"),
        n_window_infer=r.integer("n_window_infer"),
        conv_chunksize=r.integer("conv_chunksize"),
        max_source_positions=r.integer("max_source_positions"),
        activation=r.string("activation_function", allowed=("gelu",)),
    )
    if config.d_model % config.num_heads:
        raise ConfigError(f"{r.source}: {r.path}.d_model {config.d_model} is not divisible by its {config.num_heads} heads")
    if config.n_window_infer % (2 * config.n_window):
        raise ConfigError(f"{r.source}: {r.path}.n_window_infer must be a multiple of 2 * n_window")
    return config


def _text(r: _Reader) -> TextDecoderConfig:
    heads = r.integer("num_attention_heads")
    hidden = r.integer("hidden_size")
    head_dim = r.integer("head_dim", default=hidden // heads)
    rope = r.sub("rope_scaling") if r.data.get("rope_scaling") is not None else None
    section: tuple[int, ...] = ()
    interleaved = False
    if rope is not None:
        raw = rope.data.get("mrope_section", [])
        if not isinstance(raw, list) or not all(isinstance(v, int) and v > 0 for v in raw):
            raise ConfigError(f"{r.source}: {rope.path}.mrope_section must be a list of positive integers")
        section = tuple(raw)
        interleaved = rope.flag("mrope_interleaved", default=rope.flag("interleaved", default=False))
        if section and sum(section) != head_dim // 2:
            raise ConfigError(
                f"{r.source}: {rope.path}.mrope_section {list(section)} must sum to head_dim / 2 = {head_dim // 2}"
            )
    config = TextDecoderConfig(
        hidden_size=hidden,
        num_layers=r.integer("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=r.integer("num_key_value_heads"),
        head_dim=head_dim,
        intermediate_size=r.integer("intermediate_size"),
        vocab_size=r.integer("vocab_size"),
        rms_norm_eps=r.number("rms_norm_eps", at_most=MAX_RMS_NORM_EPS),
        rope_theta=r.number("rope_theta", above=1.0, at_most=MAX_ROPE_THETA),
        mrope_section=section,
        mrope_interleaved=interleaved,
        max_position_embeddings=r.integer("max_position_embeddings"),
        tie_word_embeddings=r.flag("tie_word_embeddings", default=True),
        hidden_act=r.string("hidden_act", allowed=("silu",)),
    )
    if config.num_heads % config.num_kv_heads:
        raise ConfigError(f"{r.source}: {r.path}.num_attention_heads must be a multiple of num_key_value_heads")
    if head_dim % 2:
        raise ConfigError(f"{r.source}: {r.path}.head_dim must be even for rotary positions, got {head_dim}")
    return config


def parse_config(
    data: Any, *, source: str = "config.json", generation: dict[str, Any] | None = None
) -> Qwen3Config:
    """Parse a loaded ``config.json`` (and optional ``generation_config.json``).

    Raises
    ------
    ConfigError
        A missing or malformed field; the message names its JSON path.
    """
    top = _Reader(data, "", source)
    thinker = top.sub("thinker_config")
    model_type = thinker.string("model_type", allowed=(ASR_MODEL_TYPE, ALIGNER_MODEL_TYPE))
    audio = _audio(thinker.sub("audio_config"))
    text = _text(thinker.sub("text_config"))
    if audio.output_dim != text.hidden_size:
        raise ConfigError(
            f"{source}: audio_config.output_dim {audio.output_dim} must equal text_config.hidden_size {text.hidden_size}"
        )
    languages = data.get("support_languages")
    if not isinstance(languages, list) or not languages or not all(isinstance(x, str) and x for x in languages):
        raise ConfigError(f"{source}: support_languages must be a non-empty list of language names")
    token_ids = {
        key: thinker.integer(key, minimum=0) for key in ("audio_token_id", "audio_start_token_id", "audio_end_token_id")
    }
    for key, value in token_ids.items():
        if value >= text.vocab_size:
            raise ConfigError(f"{source}: thinker_config.{key} {value} is outside the vocabulary ({text.vocab_size})")
    config = Qwen3Config(
        model_type=model_type,
        audio=audio,
        text=text,
        support_languages=tuple(languages),
        eos_token_ids=_eos_ids(generation, source, text.vocab_size),
        **token_ids,
    )
    if model_type != ALIGNER_MODEL_TYPE:
        return config
    timestamp_token_id = top.integer("timestamp_token_id", minimum=0)
    if timestamp_token_id >= text.vocab_size:
        raise ConfigError(f"{source}: timestamp_token_id {timestamp_token_id} is outside the vocabulary ({text.vocab_size})")
    return replace(
        config,
        classify_num=thinker.integer("classify_num"),
        timestamp_token_id=timestamp_token_id,
        timestamp_segment_time_ms=top.integer("timestamp_segment_time"),
    )


def _eos_ids(generation: dict[str, Any] | None, source: str, vocab_size: int) -> tuple[int, ...]:
    if not generation or "eos_token_id" not in generation:
        values: list[Any] = list(DEFAULT_EOS_TOKEN_IDS)
        where = f"{source}: the default end-token ids"
    else:
        value = generation["eos_token_id"]
        values = value if isinstance(value, list) else [value]
        where = f"generation_config.json (beside {source}): eos_token_id"
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ConfigError(f"{where} must be ids, got {value!r}")
    if any(v >= vocab_size for v in values):
        # an end token the model cannot emit: generation would never end
        raise ConfigError(f"{where} {values} fall outside the vocabulary ({vocab_size} ids)")
    return tuple(values)


def _read_json(path: Path) -> Any:
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} is missing") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({exc})") from exc


def load_config(directory: str | os.PathLike[str]) -> Qwen3Config:
    """Parse ``config.json`` (and ``generation_config.json`` if present) in ``directory``."""
    directory = Path(directory)
    generation_path = directory / "generation_config.json"
    generation = _read_json(generation_path) if generation_path.is_file() else None
    if generation is not None and not isinstance(generation, dict):
        raise ConfigError(f"{generation_path} must hold a JSON object")
    return parse_config(_read_json(directory / "config.json"), source=str(directory / "config.json"), generation=generation)
