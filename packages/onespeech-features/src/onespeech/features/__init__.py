"""Audio source, Whisper log-mel features and Silero VAD in numpy.

Public API:

- audio: ``load_audio``, ``AudioFileSource`` (16 kHz mono float32 blocks),
  ``StreamResampler`` (live blocks at any rate -> 16 kHz)
- PCM checks: ``validate_pcm`` and the ``PcmError`` family
- features: ``log_mel_spectrogram`` (at most 30 s); ``onespeech.features.mel.log_mel``
  is the alignment path (at most 300 s)
- VAD: ``SileroVad``, ``load_vad``, ``VadOptions``, ``SpeechRegion``, ``VadStream``
- chunks: ``plan_chunks``, ``ChunkPlanner`` (the same plan over a stream), ``Chunk``;
  the one chunker of streamed audio ``StreamChunker`` and its presets ``AudioChunker``
  (files) and ``LiveChunker`` (live streams), handing out ``ClosedChunk``; ``SpeechRegionStream`` (closed VAD regions
  of a stream with their samples)
- speaker encoder: ``SpeakerEncoder`` (Resemblyzer's GE2E), ``convert_resemblyzer``,
  the restricted torch-checkpoint reader ``read_torch_checkpoint``; the catalog model:
  ``onespeech.features.speaker_model.load_speaker_encoder``
"""

from onespeech.features import models as _models  # noqa: F401 - registers the vad and speaker kinds
from onespeech.features.audio import AudioFileSource, load_audio
from onespeech.features.chunker import AudioChunker, ClosedChunk, LiveChunker, StreamChunker
from onespeech.features.chunks import Chunk, ChunkPlanner, plan_chunks
from onespeech.features.errors import (
    AudioError,
    CheckpointFormatError,
    CheckpointRefusedError,
    CorruptAudioError,
    EncoderWeightsError,
    NoChannelsError,
    NonFiniteSampleError,
    OnnxFormatError,
    PcmError,
    PcmPowerOverflowError,
    PcmScaleError,
    PcmShapeError,
    PcmTooLongError,
    PcmTooShortError,
    SampleRateError,
    SpeakerModelNotFoundError,
    SpoolLimitError,
    TorchCheckpointError,
    TruncatedAudioError,
    UnreadableAudioError,
    VadModelError,
    VadModelNotFoundError,
)
from onespeech.features.mel import log_mel_spectrogram
from onespeech.features.pcm import ALIGNMENT_MAX_SAMPLES, MAX_CHUNK_SAMPLES, SAMPLE_RATE, validate_pcm
from onespeech.features.region_stream import SpeechRegionStream
from onespeech.features.resemblyzer_convert import convert_resemblyzer
from onespeech.features.segments import SpeechRegion, SpeechSegmenter, VadOptions
from onespeech.features.silero_convert import convert_silero_onnx
from onespeech.features.speaker_encoder import SpeakerEncoder
from onespeech.features.stream_resampler import StreamResampler
from onespeech.features.torch_reader import CheckpointLimits, read_torch_checkpoint
from onespeech.features.vad import SileroVad, VadStream
from onespeech.features.vad_model import load_vad

__version__ = "0.1.0"

__all__ = [
    "ALIGNMENT_MAX_SAMPLES",
    "SAMPLE_RATE",
    "MAX_CHUNK_SAMPLES",
    "AudioChunker",
    "AudioFileSource",
    "Chunk",
    "ChunkPlanner",
    "ClosedChunk",
    "AudioError",
    "CheckpointFormatError",
    "CheckpointLimits",
    "CheckpointRefusedError",
    "CorruptAudioError",
    "EncoderWeightsError",
    "LiveChunker",
    "NoChannelsError",
    "NonFiniteSampleError",
    "OnnxFormatError",
    "PcmError",
    "PcmPowerOverflowError",
    "PcmScaleError",
    "PcmShapeError",
    "PcmTooLongError",
    "PcmTooShortError",
    "SampleRateError",
    "SileroVad",
    "SpeakerEncoder",
    "SpeakerModelNotFoundError",
    "SpeechRegion",
    "SpeechRegionStream",
    "StreamChunker",
    "StreamResampler",
    "SpeechSegmenter",
    "SpoolLimitError",
    "TorchCheckpointError",
    "TruncatedAudioError",
    "UnreadableAudioError",
    "VadModelError",
    "VadModelNotFoundError",
    "VadOptions",
    "VadStream",
    "convert_resemblyzer",
    "convert_silero_onnx",
    "load_audio",
    "load_vad",
    "log_mel_spectrogram",
    "plan_chunks",
    "read_torch_checkpoint",
    "validate_pcm",
]
