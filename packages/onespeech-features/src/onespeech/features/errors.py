"""Exceptions raised by onespeech.features.

Bad input is a ``ValueError`` subclass whose message says what was wrong and what
is allowed. File problems name the file and the cause.
"""

from __future__ import annotations


class PcmError(ValueError):
    """PCM samples that no model entry point accepts (16 kHz mono float32 expected)."""


class PcmShapeError(PcmError):
    """The PCM array is not one-dimensional or not a floating-point array."""


class PcmTooShortError(PcmError):
    """PCM of 200 samples or fewer (nonempty, or empty where the entry point needs audio)."""

    def __init__(self, n_samples: int, allow_empty: bool = True) -> None:
        self.n_samples = n_samples
        if allow_empty:
            rule, fix = "nonempty 16 kHz mono audio must have", "pad it or pass an empty array"
        else:
            rule, fix = "this entry point needs 16 kHz mono audio with", "pad it"
        super().__init__(f"audio has {n_samples} samples; {rule} more than 200 (12.5 ms); {fix}")

    def __reduce__(self):  # keep pickling (multiprocessing) working with the constructor's arguments
        return (type(self), (self.n_samples,))


class PcmTooLongError(PcmError):
    """PCM longer than the bound of the entry point (30 s public, 300 s alignment)."""

    def __init__(self, n_samples: int, max_samples: int) -> None:
        self.n_samples = n_samples
        self.max_samples = max_samples
        super().__init__(
            f"audio has {n_samples} samples ({n_samples / 16000:.2f} s); this entry point allows at "
            f"most {max_samples} samples ({max_samples / 16000:g} s) of 16 kHz audio; split it into "
            "chunks first (see onespeech.features.plan_chunks)"
        )


class NonFiniteSampleError(PcmError):
    """A NaN or infinite sample."""

    def __init__(self, index: int, value: float) -> None:
        self.index = index
        self.value = value
        super().__init__(f"sample {index} is {value}; PCM samples must be finite")


class PcmPowerOverflowError(PcmError):
    """The sum of squares of the samples exceeds the float32 range."""

    def __init__(self, power: float) -> None:
        self.power = power
        super().__init__(
            f"audio power (sum of squared samples) is {power:.4g}, beyond the float32 maximum "
            "3.4028e+38; scale the samples to the [-1, 1] range"
        )


class PcmScaleError(PcmError):
    """Float samples far beyond [-1, 1]: integer-scale PCM given as floats (the first such sample is named)."""

    def __init__(self, index: int, value: float, limit: float) -> None:
        self.index = index
        self.value = value
        self.limit = limit
        super().__init__(
            f"sample {index} is {value:g}; float PCM samples must be in [-1, 1] (peaks up to {limit:g} are "
            "taken as unclipped float audio); this looks like integer PCM stored as floats: divide 16-bit "
            "samples by 32768 (or pass the int16 array itself)"
        )

    def __reduce__(self):
        return (type(self), (self.index, self.value, self.limit))


class AudioError(ValueError):
    """An audio file that cannot be decoded; ``path`` names it."""

    def __init__(self, path: str, cause: str) -> None:
        self.path = path
        self.cause = cause
        super().__init__(f"{path}: {cause}")


class UnreadableAudioError(AudioError):
    """The file cannot be opened as audio (missing, unsupported format, not audio)."""


class NoChannelsError(AudioError):
    """The file declares zero channels."""


class CorruptAudioError(AudioError):
    """The file opened but its sample data could not be decoded."""


class TruncatedAudioError(CorruptAudioError):
    """The header declares more audio than the file holds (a file cut short).

    ``declared_frames`` and ``present_frames`` are input frames (per channel).
    """

    def __init__(self, path: str, declared_frames: int, present_frames: int, sample_rate: int) -> None:
        self.declared_frames = declared_frames
        self.present_frames = present_frames
        self.sample_rate = sample_rate
        missing = declared_frames - present_frames
        super().__init__(
            path,
            f"the header declares {declared_frames} frames ({declared_frames / sample_rate:.3f} s) but the file "
            f"ends after {present_frames} ({present_frames / sample_rate:.3f} s): {missing} frames "
            f"({missing / sample_rate:.3f} s) are missing; the file was cut short, copy or export it again",
        )

    def __reduce__(self):
        return (type(self), (self.path, self.declared_frames, self.present_frames, self.sample_rate))


class SampleRateError(AudioError):
    """The file declares a sample rate outside the range the decoder accepts."""


class SpoolLimitError(AudioError):
    """A non-seekable stream is longer than the spool limit (``max_spool_bytes``)."""


class OnnxFormatError(ValueError):
    """Bytes that are not a well-formed ONNX protobuf message."""


class VadModelError(ValueError):
    """A Silero VAD model file that is not the expected graph or tensor layout."""


class VadModelNotFoundError(FileNotFoundError):
    """The VAD model named by the caller (or ``ONESPEECH_VAD_MODEL``) does not exist."""


class SpeakerModelNotFoundError(FileNotFoundError):
    """No speaker encoder could be found or fetched; the message says how to provide one."""


class EncoderWeightsError(ValueError):
    """Encoder weights with missing names, wrong shapes or non-finite values."""


class TorchCheckpointError(ValueError):
    """A checkpoint could not be read; the message names the file and what was wrong."""


class CheckpointRefusedError(TorchCheckpointError):
    """The checkpoint's pickle asks for something a plain state dict never needs (a global,
    a persistent id or a storage type outside the allowed set); nothing of it was executed."""


class CheckpointFormatError(TorchCheckpointError):
    """The file is not a well-formed checkpoint (bad archive, truncated stream, a tensor view
    outside its storage, a storage whose bytes do not match its declared size)."""
