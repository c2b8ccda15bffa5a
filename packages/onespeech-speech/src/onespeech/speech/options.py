"""TranscribeOptions: every option of a transcription, declared and checked once.

``transcribe``, ``Transcriber``, ``LiveSession``, ``stream_file``, ``transcribe_corpus``,
the server (``ServerConfig.options``) and the command line all take one of these;
their keyword arguments are sugar that builds it (:meth:`TranscribeOptions.build`).
A field's ``metadata["flag"]`` (:class:`onespeech.speech.flags.Flag`) is its
command-line flag, so a new field is a new flag of every command that transcribes.
Run-time controls that change no output (``progress``, ``cancel``, ``keep_loaded``)
are arguments of the calls, not options.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from onespeech.features import SileroVad, VadOptions
from onespeech.kernels.precision import Precision
from onespeech.speech.flags import (
    Flag,
    decode_batch_option,
    decode_memory_option,
    max_new_tokens_option,
    max_pause_option,
    model_or_none,
    speakers_type,
    threads_option,
)
from onespeech.speech.speakers.turns import DEFAULT_MAX_PAUSE, check_max_pause

if TYPE_CHECKING:
    from onespeech.align import Qwen3AlignerOptions
    from onespeech.qwen3 import BatchLimits, Qwen3Options

__all__ = ["DEFAULT_ALIGNER", "DEFAULT_MODEL", "RUN_ONLY", "TranscribeOptions", "check_speakers"]

#: The recognizer used when no model is given.
DEFAULT_MODEL = "Qwen/Qwen3-ASR-0.6B"
#: The forced aligner used when no aligner is given.
DEFAULT_ALIGNER = "Qwen/Qwen3-ForcedAligner-0.6B"

#: Options that change no output: a Document and a batch record leave them out.
RUN_ONLY = frozenset({"threads", "decode_batch", "decode_memory_mb"})

VadSetting = SileroVad | str | os.PathLike[str] | None


def _flag(*names: str, help: str, **more: Any) -> dict[str, Flag]:  # noqa: A002 - argparse's own word
    return {"flag": Flag(names, help, **more)}


@dataclass(frozen=True)
class TranscribeOptions:
    """What a transcription is made with.

    Attributes
    ----------
    model : str
        A catalog id (fetched on first use, verified, converted and cached) or a local
        directory (publisher files or runtime files). Default Qwen/Qwen3-ASR-0.6B.
    language : str | None
        A tag ("en") or name forcing the language of every chunk; None lets the model
        identify the language of each chunk.
    aligner : str or None
        The forced aligner (catalog id or directory); None skips word timing.
    context : str | None
        Biasing context for the recognizer.
    precision : "fp32" | "bf16" | "int8"
    threads : int | None
        CPU threads (None: all available).
    max_new_tokens : int
        Token budget per chunk (1..4096); a chunk that reaches it raises ChunkLimitError.
    decode_batch : int
        At most this many chunks of a file decode together (default 8; 1 decodes them
        one at a time). Changes no output: every chunk's text is the same bits either way.
    decode_memory_mb : int | None
        MiB of key/value caches the chunks decoding together may hold, each counted at
        its full size (prompt + max_new_tokens positions); one chunk always decodes.
        None (default): auto, a quarter of the bytes of weights the recognizer reads
        (``Qwen3Recognizer.weight_bytes``; ``onespeech.qwen3.BatchLimits``): for the
        0.6B model 746 MiB in FP32, 373 MiB in BF16, 225 MiB in INT8 (whose caches
        stay float32), so the caches stay in proportion to the weights. Changes no output.
    speakers : "auto", int or False
        Speaker attribution after recognition and timing ("auto": the count is found;
        an int: that many speakers, 1..64; False: skipped). See docs/speakers.md.
    max_pause : float
        Seconds: a speaker's pauses up to this long belong to their turn (default 2.0).
    vad : SileroVad, path or None
        The VAD for audio over 30 s and for live chunks; None: the default Silero VAD.
    vad_options : VadOptions
        Segmentation settings of the VAD.
    catalog_dir : str or None
        A directory of catalog files used instead of the shipped catalog to resolve ids.

    Raises
    ------
    ValueError, TypeError
        A value outside what the option allows; the message names the option.
    """

    model: str = field(default=DEFAULT_MODEL, metadata=_flag(
        "-m", "--model", help="catalog id or local model directory (default {default}; downloaded on first use)"))
    language: str | None = field(default=None, metadata=_flag(
        "-l", "--language", help="force a language (tag such as en, de, zh); default: identified per chunk"))
    aligner: str | None = field(default=DEFAULT_ALIGNER, metadata=_flag(
        "--aligner", type=model_or_none,
        help="forced aligner id or directory for word times, or 'none' (default {default})"))
    threads: int | None = field(default=None, metadata=_flag(
        "--threads", type=threads_option, help="CPU threads (default: all available)"))
    precision: str = field(default="fp32", metadata=_flag(
        "--precision", choices=tuple(p.value for p in Precision), help="weights (default {default})"))
    context: str | None = field(default=None, metadata=_flag(
        "--context", help="biasing context text for the recognizer"))
    max_new_tokens: int = field(default=512, metadata=_flag(
        "--max-new-tokens", type=max_new_tokens_option, help="token budget per chunk, 1..4096 (default {default})"))
    decode_batch: int = field(default=8, metadata=_flag(
        "--decode-batch", type=decode_batch_option,
        help="chunks decoded together, 1..256; 1 decodes one at a time (default {default}; same output)"))
    decode_memory_mb: int | None = field(default=None, metadata=_flag(
        "--decode-memory-mb", type=decode_memory_option, metavar="MIB|auto",
        help="key/value cache memory of the chunks decoded together, in MiB (default auto: a quarter of "
             "the recognizer's weights in memory; same output)"))
    vad: VadSetting = field(default=None, metadata=_flag(
        "--vad", help="silero_vad.onnx to use (default: the catalog's Silero VAD)"))
    speakers: str | int | bool = field(default="auto", metadata=_flag(
        "--speakers", type=speakers_type(), metavar="auto|N|off", group="speakers",
        help="who speaks: auto, a count 1..64 or off (default auto: the count is found)"))
    max_pause: float = field(default=DEFAULT_MAX_PAUSE, metadata=_flag(
        "--max-pause", type=max_pause_option, metavar="SECONDS", group="speakers",
        help="a speaker's pauses up to this long stay in their turn; longer ones end it (default {default:g})"))
    vad_options: VadOptions = field(default_factory=VadOptions)
    catalog_dir: str | None = None

    def __post_init__(self) -> None:
        # the recognizer's own checks (context, precision, threads, max_new_tokens), with their messages
        set_ = object.__setattr__  # frozen: normalized once, here
        set_(self, "precision", self.recognizer_options().precision.value)
        set_(self, "model", _path_text("model", self.model))
        set_(self, "aligner", None if self.aligner is None else _path_text("aligner", self.aligner))
        set_(self, "catalog_dir", None if self.catalog_dir is None else _path_text("catalog_dir", self.catalog_dir))
        if self.language is not None and not isinstance(self.language, str):
            raise TypeError(f"language must be a string or None, not {type(self.language).__name__}")
        check_speakers(self.speakers)
        self.batch_limits()  # decode_batch and decode_memory_mb, with their messages
        set_(self, "max_pause", check_max_pause(self.max_pause))
        if self.vad is not None and not isinstance(self.vad, (SileroVad, str, os.PathLike)):
            raise TypeError(f"vad must be a SileroVad, a path or None, not {type(self.vad).__name__}")
        if isinstance(self.vad, os.PathLike):
            set_(self, "vad", os.fspath(self.vad))
        if self.vad_options is None:
            set_(self, "vad_options", VadOptions())
        elif not isinstance(self.vad_options, VadOptions):
            raise TypeError(f"vad_options must be a VadOptions or None, not {type(self.vad_options).__name__}")

    def recognizer_options(self) -> Qwen3Options:
        """The recognizer's share of these options."""
        from onespeech.qwen3 import Qwen3Options

        return Qwen3Options(context=self.context, precision=Precision.parse(self.precision), threads=self.threads,
                            max_new_tokens=self.max_new_tokens)

    def batch_limits(self) -> BatchLimits:
        """The bounds of a file's decoding batch (``decode_batch``, ``decode_memory_mb``).

        An auto ``decode_memory_mb`` (None) stays auto (``kv_budget_bytes=None``): the
        recognizer that makes the batch sizes it (``Qwen3Recognizer.batch_decoder``).
        """
        from onespeech.qwen3 import BatchLimits

        for name, auto in (("decode_batch", ""), ("decode_memory_mb", " (MiB) or None (auto)")):
            value = getattr(self, name)
            if auto and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid; expected an int >= 1{auto}")
        memory = self.decode_memory_mb
        return BatchLimits(kv_budget_bytes=None if memory is None else memory << 20, max_batch=self.decode_batch)

    def aligner_options(self) -> Qwen3AlignerOptions:
        """The forced aligner's share of these options."""
        from onespeech.align import Qwen3AlignerOptions

        return Qwen3AlignerOptions(precision=Precision.parse(self.precision), threads=self.threads)

    @classmethod
    def build(cls, options: TranscribeOptions | None = None, **changes: Any) -> TranscribeOptions:
        """``options`` (default: the defaults) with ``changes``; an unknown name is a TypeError naming it."""
        if options is not None and not isinstance(options, TranscribeOptions):
            raise TypeError(f"options must be a TranscribeOptions or None, not {type(options).__name__}")
        unknown = sorted(set(changes) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unknown transcription option(s) {', '.join(unknown)}; the options are "
                            f"{', '.join(f.name for f in fields(cls))}")
        return replace(options, **changes) if options is not None else cls(**changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (a loaded VAD as its source path), as a Document records them."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["vad"] = self.vad.source if isinstance(self.vad, SileroVad) else (
            None if self.vad is None else os.fspath(self.vad))
        data["vad_options"] = asdict(self.vad_options)
        return data

    def record(self) -> dict[str, Any]:
        """:meth:`to_dict` without the options that change no output (``RUN_ONLY``: threads).

        What a Document and a batch record keep: two runs with the same record give the same outputs.
        """
        return {name: value for name, value in self.to_dict().items() if name not in RUN_ONLY}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TranscribeOptions:
        """The options of :meth:`to_dict` (unknown names refused, as :meth:`build` does)."""
        values = dict(data)
        if isinstance(values.get("vad_options"), dict):
            values["vad_options"] = VadOptions(**values["vad_options"])
        return cls.build(**values)


def check_speakers(speakers: object) -> None:
    """``speakers`` must be "auto", a count 1..MAX_SPEAKERS or False."""
    from onespeech.speech.speakers.diarize import MAX_SPEAKERS

    if speakers == "auto" or speakers is False:
        return
    if isinstance(speakers, int) and not isinstance(speakers, bool) and 1 <= speakers <= MAX_SPEAKERS:
        return
    raise ValueError(f"speakers={speakers!r}; use 'auto', a number of speakers (1..{MAX_SPEAKERS}) or False")


def _path_text(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a catalog id or a directory path, not {type(value).__name__}")
    return os.fspath(value)
