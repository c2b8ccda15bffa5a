"""Qwen3Recognizer: low-level Qwen3-ASR recognition of 16 kHz mono PCM.

One recognition of a bounded input (at most 30 s)::

    pcm -> validate_pcm -> log-mel f32[128, n/160] -> AudioEncoder -> f32[n_audio, D]
        -> prompt ids (system context, audio pads, assistant turn [, language X<asr_text>])
        -> token embeddings with the audio pad rows replaced by the encoder output
        -> Qwen3Decoder greedy decoding (fresh KV cache) until <|im_end|>/<|endoftext|>
        -> decode, parse "language X<asr_text>text"

Longer input goes through VAD-first chunks (``onespeech.features``), each chunk
recognised with fresh decoder state by :meth:`Qwen3Recognizer.recognize_chunk` (the
public step the speech layer's file path and live sessions call too); segments keep
the source clock. Word timings stay None: no timing model is ever loaded here.

One recognizer may be shared by threads: its calls are serialized by a lock (the
decoder keeps one cache plan), so two threads take turns rather than run at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from onespeech.features import log_mel_spectrogram, validate_pcm
from onespeech.features.pcm import MAX_CHUNK_SAMPLES, SAMPLE_RATE
from onespeech.kernels.cancel import Cancel, check_cancel
from onespeech.kernels.errors import ObjectClosedError
from onespeech.kernels.precision import Precision
from onespeech.kernels.threads import check_threads, thread_limit
from onespeech.qwen3.backbone import Qwen3Backbone
from onespeech.qwen3.batch_decode import BatchDecoder, BatchLimits, generate_batch
from onespeech.qwen3.decoder import Generation
from onespeech.qwen3.encoder import ENCODER_ATTENTION
from onespeech.qwen3.errors import (
    ConfigError,
    MaxNewTokensError,
    ModelKindError,
    raise_if_recognition_cancelled,
)
from onespeech.qwen3.languages import Languages
from onespeech.qwen3.load_options import options_from
from onespeech.qwen3.prompt import Prompt, build_prompt, check_context, parse_output
from onespeech.qwen3.runtime import RuntimeModel
from onespeech.qwen3.transcript import Segment, Transcript, Word
from onespeech.qwen3.units import written_units
from onespeech.tokenizer import Qwen3Tokenizer

if TYPE_CHECKING:
    from onespeech.features import ClosedChunk, SileroVad

MAX_NEW_TOKENS_LIMIT = 4096  # spec: max_new_tokens is 1..4096


@dataclass(frozen=True)
class Qwen3Options:
    """Options of a Qwen3Recognizer.

    Attributes
    ----------
    context : str | None
        System-context prompt for biasing; at most 4096 token ids, special tokens refused.
    precision : Precision
        FLOAT32 (default), BFLOAT16 or INT8; the strings "fp32", "bf16" and "int8" are accepted.
    threads : int | None
        Threads for BLAS and kernels; None: OMP_NUM_THREADS, else the CPUs available.
    max_new_tokens : int
        Per chunk, 1..4096; reaching it raises MaxNewTokensError.
    encoder_attention : str
        "full" (default, the reference's CPU behaviour) or "windowed" (104-token
        windows, the FlashAttention-2 behaviour the model was trained with).
    """

    context: str | None = None
    precision: Precision = Precision.FLOAT32
    threads: int | None = None
    max_new_tokens: int = 512
    encoder_attention: str = "full"

    def __post_init__(self) -> None:
        if self.context is not None and not isinstance(self.context, str):
            raise TypeError(f"context must be a string or None, not {type(self.context).__name__}")
        object.__setattr__(self, "precision", Precision.parse(self.precision))
        if self.threads is not None:
            check_threads(self.threads)
        _check_max_new_tokens(self.max_new_tokens)
        if self.encoder_attention not in ENCODER_ATTENTION:
            raise ValueError(f"encoder_attention={self.encoder_attention!r}; use one of {ENCODER_ATTENTION}")


def _check_max_new_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NEW_TOKENS_LIMIT:
        raise ValueError(f"max_new_tokens={value!r} is outside 1..{MAX_NEW_TOKENS_LIMIT}")
    return value


@dataclass(frozen=True)
class ChunkRecognition:
    """Everything one bounded recognition computed (for parity checks and research).

    Attributes
    ----------
    mel : ndarray[float32], shape (128, n_frames)
    audio_embeds : ndarray[float32], shape (n_audio, hidden_size)
        Encoder + projector output.
    prompt : Prompt
    generation : Generation
        Greedy ids after the prompt (end token excluded), ``finished`` and, if
        asked, the first-step logits.
    """

    mel: np.ndarray
    audio_embeds: np.ndarray
    prompt: Prompt
    generation: Generation


@dataclass(frozen=True)
class RecognizedChunk:
    """The recognition of one chunk of at most 30 s (:meth:`Qwen3Recognizer.recognize_chunk`).

    Attributes
    ----------
    text : str
        The recognised text ("" for silence).
    language : str | None
        Short tag (``"en"``) of the language, or the model's name for one without a
        known tag; the forced language when one was given; None if not identified.
    finished : bool
        True if the model ended its answer; False if it reached ``max_new_tokens``
        first (``text`` is then what it produced until there).
    answer : str
        The decoded answer before parsing (``"language English<asr_text>..."``).
    """

    text: str
    language: str | None
    finished: bool
    answer: str


class Qwen3Recognizer:
    """Greedy Qwen3-ASR recognition on the OneSpeech runtime.

    Build with :meth:`load`; use as a context manager (or call :meth:`close`) to
    release the memory-mapped runtime files. Safe to share between threads: calls
    are serialized (one runs at a time).
    """

    def __init__(
        self,
        model: RuntimeModel,
        tokenizer: Qwen3Tokenizer,
        options: Qwen3Options,
        vad: SileroVad | str | os.PathLike[str] | None = None,
    ) -> None:
        self._model = model
        self.config = model.config
        self.tokenizer = tokenizer
        self.options = options
        self.languages = Languages(self.config.support_languages)
        self._context = check_context(tokenizer, options.context)
        self.backbone = Qwen3Backbone(model, bf16_activations=options.precision is Precision.BFLOAT16)
        self.encoder = self.backbone.encoder
        self.decoder = self.backbone.decoder
        self._vad = vad
        self._closed = False
        # the decoder's cache plan and buffers belong to one call at a time
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        model_directory: str | os.PathLike[str],
        options: Qwen3Options | None = None,
        cancel: Cancel = None,
        *,
        vad: SileroVad | str | os.PathLike[str] | None = None,
        context: str | None = None,
        precision: Precision | str | None = None,
        threads: int | None = None,
        max_new_tokens: int | None = None,
        encoder_attention: str | None = None,
    ) -> Qwen3Recognizer:
        """Load a Qwen3-ASR model directory.

        ``load(directory, threads=4, context="...")`` is ``load(directory,
        Qwen3Options(threads=4, context="..."))``; give options or keywords, not both.

        Parameters
        ----------
        model_directory : path or catalog id
            A directory of publisher files (converted into runtime files there on
            first load), one already holding runtime files of the precision, or a
            catalog id such as ``"Qwen/Qwen3-ASR-0.6B"`` (resolved through the model
            cache: missing publisher files are downloaded and verified first).
        options : Qwen3Options, optional
        cancel : threading.Event-like, callable or None
            Checked before and after the (possibly long) conversion.
        vad : SileroVad | path | None
            Voice activity detector for inputs over 30 s (a loaded ``SileroVad`` or
            the path of ``silero_vad.onnx``), loaded the first time one is needed.
            None: the catalog's Silero VAD (``silero-vad``), fetched, verified and
            converted into the model cache on first use like the Qwen models.
        context, precision, threads, max_new_tokens, encoder_attention
            The fields of ``Qwen3Options``, instead of ``options``.

        Raises
        ------
        ModelKindError
            The directory or catalog id holds a forced aligner, not a Qwen3-ASR model.
        UnknownModelError, FileNotFoundError
            Neither a catalog id nor an existing directory.
        ModelIntegrityError
            A damaged file (the message names the file to remove).
        ConversionInProgressError
            Another process is converting this directory; retry after it completes.
        ContextError
            ``options.context`` is too long or holds special tokens.
        TypeError
            Both ``options`` and a keyword, or ``options`` of another type.
        """
        from onespeech.kernels.resolve import resolve
        from onespeech.qwen3.config import load_config
        from onespeech.qwen3.runtime import load_model

        options = options_from(Qwen3Options, options, "Qwen3Recognizer.load", context=context, precision=precision,
                               threads=threads, max_new_tokens=max_new_tokens, encoder_attention=encoder_attention)
        check_cancel(cancel)
        raise_if_recognition_cancelled(cancel)
        if Path(model_directory).is_dir():
            config = load_config(model_directory)  # before converting anything
            if config.is_aligner:
                raise ModelKindError(
                    f"{model_directory} holds a {config.model_type} model (a forced aligner); Qwen3Recognizer "
                    "needs a Qwen3-ASR checkpoint (e.g. Qwen/Qwen3-ASR-0.6B); load aligners with "
                    "onespeech.align.Qwen3ForcedAligner"
                )
        # a catalog id or a directory to its runtime files (an unknown id raises UnknownModelError,
        # a missing path FileNotFoundError)
        model_directory = resolve(str(model_directory), options.precision.value, kind="asr", cancel=cancel)
        raise_if_recognition_cancelled(cancel)
        with thread_limit(options.threads):
            model = load_model(model_directory, options.precision.value, kind="asr")
        try:
            raise_if_recognition_cancelled(cancel)
            tokenizer = Qwen3Tokenizer.load(model.directory)
            return cls(model, tokenizer, options, vad=vad)
        except BaseException:
            model.close()
            raise

    def close(self) -> None:
        """Release the mapped runtime files and the decoder's buffers (after a running call ends)."""
        with self._lock:
            self._closed = True
            self.backbone.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ObjectClosedError("this Qwen3Recognizer is closed; load the model again to recognise more audio")

    def __enter__(self) -> Qwen3Recognizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- recognition ------------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, language: str | None = None, cancel: Cancel = None) -> Transcript:
        """Recognise 16 kHz mono float PCM.

        Parameters
        ----------
        audio : ndarray[float32], shape (n_samples,)
            Empty, or more than 200 samples. Over 30 s uses VAD-first chunks.
        language : str | None
            A tag ("en", "zh", "yue", ...) or name forcing the language; None (the
            default) lets the model identify it.
        cancel : threading.Event-like, callable or None
            Checked between encoder layers and decoder steps.

        Returns
        -------
        Transcript
            Text, language tag, one segment per recognised chunk (source clock),
            words with their written forms and None times.

        Raises
        ------
        PcmError
            Too short, nonfinite or power-overflowing PCM.
        UnsupportedLanguageError
        MaxNewTokensError
            A chunk reached ``options.max_new_tokens`` before the model ended it.
        RecognitionCancelled
        ObjectClosedError
            The recognizer was closed.
        """
        check_cancel(cancel)
        pcm = validate_pcm(audio)
        name = self.languages.resolve(language)
        with self._lock:
            self._check_open()
            if pcm.shape[0] == 0:
                return Transcript.empty()
            segments = []
            with thread_limit(self.options.threads):
                for closed in self._chunks(pcm, cancel):
                    start, end = closed.chunk.start, closed.chunk.end
                    segment = self._transcribe_chunk(closed.pcm, start, end, name, cancel)
                    if segment.text:
                        segments.append(segment)
        return Transcript.from_segments(segments)

    def recognize_chunk(
        self, audio: np.ndarray, language: str | None = None, cancel: Cancel = None
    ) -> RecognizedChunk:
        """Recognise one chunk of at most 30 s with fresh decoder state.

        The step :meth:`transcribe` takes for each of its chunks, and what the
        ``onespeech.speech`` file path and live sessions call per chunk. Unlike
        :meth:`transcribe`, reaching ``max_new_tokens`` is reported in
        ``RecognizedChunk.finished`` instead of raised, so a caller can name the
        chunk and keep what came before.

        Parameters
        ----------
        audio : ndarray[float32], shape (n_samples,)
            16 kHz mono PCM, more than 200 samples and at most 480000 (30 s).
        language : str | None
            A tag or name forcing the language; None lets the model identify it.
        cancel : threading.Event-like, callable or None
            Checked between encoder layers and decoder steps.

        Raises
        ------
        PcmError
            200 samples or fewer, more than 30 s, nonfinite or power-overflowing PCM.
        UnsupportedLanguageError
        RecognitionCancelled
        ObjectClosedError
        """
        check_cancel(cancel)
        pcm = validate_pcm(audio, max_samples=MAX_CHUNK_SAMPLES, allow_empty=False)
        name = self.languages.resolve(language)
        with self._lock, thread_limit(self.options.threads):
            generation = self.recognize(pcm, name, self.options.max_new_tokens, cancel).generation
        return self.chunk_result(generation, language)

    def chunk_prompt(self, audio: np.ndarray, language: str | None = None, cancel: Cancel = None) -> np.ndarray:
        """The decoder's prompt for one chunk: its embeddings with the encoder's audio rows.

        The first half of :meth:`recognize_chunk` (PCM checks, log-mel, encoder,
        prompt), for decoding the chunk in a batch (:meth:`batch_decoder`)::

            seq = batch.join(rec.chunk_prompt(pcm), rec.options.max_new_tokens, decoder=rec.decoder)
            ...  # batch.step() until seq.done
            result = rec.chunk_result(seq.result())

        Parameters and errors as :meth:`recognize_chunk`.

        Returns
        -------
        ndarray[float32], shape (n_prompt, hidden_size)
        """
        check_cancel(cancel)
        pcm = validate_pcm(audio, max_samples=MAX_CHUNK_SAMPLES, allow_empty=False)
        name = self.languages.resolve(language)
        with self._lock, thread_limit(self.options.threads):
            self._check_open()
            return self._stage(pcm, name, self.options.max_new_tokens, cancel)[3]

    def chunk_result(self, generation: Generation, language: str | None = None) -> RecognizedChunk:
        """The text, language and finish of one chunk's generation (the second half of :meth:`recognize_chunk`)."""
        name = self.languages.resolve(language)
        answer = self.decode_ids(generation.ids)
        parsed, text = parse_output(answer, name)
        return RecognizedChunk(text, self.languages.tag(parsed), generation.finished, answer)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights this recognizer reads: the encoder's and the decoder's tensors.

        As stored in the runtime files of its precision (memory-mapped; resident once
        read). The released configs tie the output head to the token embedding: in
        FP32 and BF16 the embedding is the head, counted once, and the runtime's copy
        of it is never read; in INT8 that copy, as int8 codes, is the head, counted
        beside the embedding (`onespeech.qwen3.convert.runtime_head_name`).
        An auto decode budget is a share of this (``BatchLimits.kv_budget``).
        """
        return self.encoder.weight_bytes + self.decoder.weight_bytes

    def batch_decoder(self, limits: BatchLimits | None = None) -> BatchDecoder:
        """A decode batch over this recognizer's decoder and end ids (``onespeech.qwen3.BatchDecoder``).

        An auto budget (``BatchLimits()``, the default) is ``AUTO_KV_FRACTION`` of
        :attr:`weight_bytes`; the batch's ``limits`` hold it in bytes.
        """
        self._check_open()
        limits = (limits if limits is not None else BatchLimits()).resolve(self.weight_bytes)
        return BatchDecoder(self.decoder, self.config.eos_token_ids, limits)

    def generate(
        self, audio: np.ndarray, language: str | None = None, max_new_tokens: int | None = None
    ) -> list[int]:
        """Raw greedy ids after the prompt for at most 30 s of audio.

        Stops at an end token (not included) or after ``max_new_tokens`` ids
        (default: the options' value) without raising. For research, parity checks
        and benchmarks; :meth:`transcribe` is built on the same steps.
        """
        limit = self.options.max_new_tokens if max_new_tokens is None else _check_max_new_tokens(max_new_tokens)
        name = self.languages.resolve(language)
        pcm = validate_pcm(audio, max_samples=MAX_CHUNK_SAMPLES)
        with self._lock:
            self._check_open()
            if pcm.shape[0] == 0:
                return []
            with thread_limit(self.options.threads):
                return self.recognize(pcm, name, limit).generation.ids

    def recognize(
        self,
        pcm: np.ndarray,
        language_name: str | None,
        max_new_tokens: int,
        cancel: Cancel = None,
        *,
        mel: np.ndarray | None = None,
        keep_first_logits: bool = False,
        min_new_tokens: int = 0,
        forced_ids: Sequence[int] | None = None,
    ) -> ChunkRecognition:
        """One bounded recognition with fresh decoder state, keeping every stage's output.

        For parity tools and research; :meth:`recognize_chunk` is the same recognition
        as text, language and finish.

        ``language_name`` is the model's name ("English") or None; ``mel`` may be
        given to bypass the 30 s feature bound (parity checks on longer inputs).
        With ``forced_ids`` the decoder is teacher-forced (``Qwen3Decoder.teacher_forced``):
        ``generation.ids`` are then its argmax after each prefix of ``forced_ids``
        (end ids masked from the first ``min_new_tokens``), ``finished`` is False and
        no first logits are kept.
        """
        check_cancel(cancel)
        with self._lock:
            self._check_open()
            positions = len(forced_ids) if forced_ids is not None else max_new_tokens
            mel, audio_embeds, prompt, embeds = self._stage(pcm, language_name, positions, cancel, mel)
            if forced_ids is not None:
                choices = self.decoder.teacher_forced(
                    embeds, forced_ids, cancel, eos_ids=self.config.eos_token_ids, min_new_tokens=min_new_tokens
                )
                return ChunkRecognition(mel, audio_embeds, prompt, Generation(choices, False))
            generation = self.decoder.generate(
                embeds,
                max_new_tokens,
                self.config.eos_token_ids,
                cancel,
                keep_first_logits=keep_first_logits,
                min_new_tokens=min_new_tokens,
            )
            return ChunkRecognition(mel, audio_embeds, prompt, generation)

    def recognize_batch(
        self,
        chunks: Sequence[np.ndarray],
        language: str | None = None,
        max_new_tokens: int | None = None,
        cancel: Cancel = None,
        *,
        limits: BatchLimits | None = None,
        keep_first_logits: bool = False,
        keep_logits: bool = False,
        min_new_tokens: int = 0,
    ) -> list[ChunkRecognition]:
        """`recognize` of several bounded chunks, their decode steps run together.

        Each chunk is encoded and prefilled alone when it joins the batch; then each
        decode step advances every live chunk by one token, reading the decoder's
        weights once for all (`onespeech.qwen3.batch_decode`). Every result equals
        ``recognize`` of that chunk alone bit for bit (ids, ``finished``, kept logits),
        under the same thread count.

        Parameters
        ----------
        chunks : sequence of ndarray[float32], shape (n_samples,)
            16 kHz mono PCM, each more than 200 samples and at most 30 s.
        language : str | None
            A tag or name forcing the language of every chunk; None lets the model identify it.
        max_new_tokens : int | None
            Per chunk, 1..4096 (default: the options' value); a chunk reaching it stops
            there (``generation.finished`` False), as in ``generate``.
        cancel : threading.Event-like, callable or None
            Checked between encoder and decoder layers and between steps.
        limits : BatchLimits, optional
            KV-cache budget and largest batch (defaults: caches counted at full
            capacity within ``AUTO_KV_FRACTION`` of :attr:`weight_bytes`, 8 chunks).
        keep_first_logits, keep_logits, min_new_tokens
            As for `recognize` and `Qwen3Decoder.generate`.

        Returns
        -------
        list of ChunkRecognition, one per chunk in order.

        Raises
        ------
        PcmError
            A chunk that is empty, too short, over 30 s, nonfinite or power-overflowing.
        UnsupportedLanguageError
        RecognitionCancelled
        ObjectClosedError
        """
        check_cancel(cancel)
        limit = self.options.max_new_tokens if max_new_tokens is None else _check_max_new_tokens(max_new_tokens)
        name = self.languages.resolve(language)
        pcms = [validate_pcm(c, max_samples=MAX_CHUNK_SAMPLES, allow_empty=False) for c in chunks]
        staged: list[tuple[np.ndarray, np.ndarray, Prompt]] = []

        def prompts() -> Iterator[np.ndarray]:
            # each chunk's encoder pass runs only when the previous chunk has joined the batch
            for pcm in pcms:
                mel, audio_embeds, prompt, embeds = self._stage(pcm, name, limit, cancel)
                staged.append((mel, audio_embeds, prompt))
                yield embeds

        with self._lock:
            self._check_open()
            with thread_limit(self.options.threads):
                generations = generate_batch(
                    self.decoder,
                    prompts(),
                    limit,
                    self.config.eos_token_ids,
                    cancel,
                    limits=(limits if limits is not None else BatchLimits()).resolve(self.weight_bytes),
                    keep_first_logits=keep_first_logits,
                    keep_logits=keep_logits,
                    min_new_tokens=min_new_tokens,
                )
        return [ChunkRecognition(*stage, generation) for stage, generation in zip(staged, generations, strict=True)]

    # -- stages -----------------------------------------------------------------------

    def _stage(
        self, pcm: np.ndarray, name: str | None, max_new_tokens: int, cancel: Cancel, mel: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, Prompt, np.ndarray]:
        """log-mel, encoder output, prompt and the prompt's embeddings (audio rows substituted)."""
        if mel is None:
            mel = log_mel_spectrogram(pcm)
        audio_embeds = self.encoder.forward(mel, self.options.encoder_attention, cancel)
        prompt = build_prompt(self.tokenizer, self._context, audio_embeds.shape[0], name)
        self._check_positions(len(prompt.ids) + max_new_tokens)
        embeds = self.decoder.embed(prompt.ids)
        # audio-token embedding substitution at the audio pad positions
        embeds[prompt.audio_start : prompt.audio_start + prompt.n_audio] = audio_embeds
        return mel, audio_embeds, prompt, embeds

    def _check_positions(self, needed: int) -> None:
        limit = self.config.text.max_position_embeddings
        if needed > limit:
            raise ConfigError(
                f"{self._model.directory}/config.json: text_config.max_position_embeddings is {limit}, but this "
                f"recognition needs {needed} positions (prompt and max_new_tokens); the released configs allow 65536"
            )

    def _transcribe_chunk(
        self, pcm: np.ndarray, start: int, end: int, name: str | None, cancel: Cancel
    ) -> Segment:
        result = self.recognize_chunk(pcm, name, cancel)
        if not result.finished:
            raise MaxNewTokensError(
                f"recognition of {start / SAMPLE_RATE:.2f}-{end / SAMPLE_RATE:.2f} s reached "
                f"max_new_tokens={self.options.max_new_tokens} before the model ended its answer; "
                f"raise Qwen3Options.max_new_tokens (up to {MAX_NEW_TOKENS_LIMIT})"
            )
        # the segment holds its written units (untimed): Transcript.words is their view
        words = tuple(Word(u.text) for u in written_units(result.text, result.language))
        return Segment(start / SAMPLE_RATE, end / SAMPLE_RATE, result.text, result.language, words)

    def decode_ids(self, ids: list[int]) -> str:
        """The text of generated ids (special tokens skipped), before ``parse_output``."""
        # ids past the tokenizer (the embedding has padding rows) carry no text
        known = [i for i in ids if i < self.tokenizer.vocab_size]
        return self.tokenizer.decode(known, skip_special_tokens=True)

    def _chunks(self, pcm: np.ndarray, cancel: Cancel) -> Iterator[ClosedChunk]:
        """The chunks recognised separately: the whole input up to 30 s, else VAD-first chunks.

        The file path's chunker (``onespeech.features.AudioChunker``), fed in 30 s blocks
        and read lazily (one chunk's copy alive at a time), so the chunks are those
        ``onespeech.speech.transcribe`` makes of the same audio.
        """
        from onespeech.features import AudioChunker

        chunker = AudioChunker(self._load_vad)
        for start in range(0, pcm.shape[0], MAX_CHUNK_SAMPLES):
            raise_if_recognition_cancelled(cancel)
            yield from chunker.feed(pcm[start : start + MAX_CHUNK_SAMPLES])
        yield from chunker.finish()

    def _load_vad(self) -> SileroVad:
        from onespeech.features import load_vad

        self._vad = load_vad(self._vad)
        return self._vad
