"""Structured JSON errors in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Status codes: 400 bad input (not audio, audio too long, unsupported language,
context too long, bad form fields), 401 a missing or wrong API key, 404 unknown
model or path, 405 wrong method, 408 a body slower than the read timeout, 413
request body over the limit, 422 a chunk reached max_new_tokens, 499 the client
went away (recognition was cancelled), 503 the queue is full (with ``Retry-After``),
500 anything unexpected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLIENT_CLOSED = 499  # nginx's "client closed request": the response has nobody to go to


@dataclass
class ApiError(Exception):
    """An error answered as JSON with ``status``.

    Attributes
    ----------
    status : int
    message : str
        What was wrong and what is allowed.
    type : str
        OpenAI error type (``invalid_request_error``, ``server_error`` ...).
    code : str
        Machine-readable reason (``unreadable_audio``, ``queue_full`` ...).
    param : str or None
        The form field at fault, if any.
    headers : dict
        Extra response headers (``Retry-After``).
    """

    status: int
    message: str
    code: str
    type: str = "invalid_request_error"
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, code: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code, param=param)


def accepted_formats() -> str:
    """The main audio formats the installed libsndfile decodes, for messages."""
    import soundfile

    names = {"WAV": "WAV", "FLAC": "FLAC", "OGG": "OGG (Vorbis, Opus)", "MP3": "MP3", "AIFF": "AIFF"}
    available = soundfile.available_formats()
    return ", ".join(text for name, text in names.items() if name in available)


def not_audio(cause: str) -> ApiError:
    return bad_request(f"the uploaded file is not a decodable audio file; send {accepted_formats()} "
                       f"(the decoder said: {cause})", "unreadable_audio", "file")


def audio_too_long(seconds: float, max_seconds: float, *, at_least: bool = False) -> ApiError:
    return bad_request(f"the audio is {'at least ' if at_least else ''}{seconds:.1f} s long; this server takes at "
                       f"most {max_seconds:g} s per request (split the file, or start the server with a larger "
                       "--max-audio-seconds)", "audio_too_long", "file")


def from_exception(error: BaseException) -> ApiError:
    """Map a library exception raised by a transcription to its API error."""
    from onespeech.features import AudioError, NoChannelsError, PcmError, UnreadableAudioError
    from onespeech.kernels.errors import OperationCancelledError
    from onespeech.qwen3 import ContextError, MaxNewTokensError, UnsupportedLanguageError

    if isinstance(error, ApiError):
        return error
    if isinstance(error, OperationCancelledError):
        return ApiError(CLIENT_CLOSED, "the client closed the connection; recognition was stopped", "cancelled",
                        type="cancelled")
    if isinstance(error, (UnreadableAudioError, NoChannelsError)):
        return not_audio(error.cause)
    if isinstance(error, AudioError):  # the file names no path here: the upload has none
        return bad_request(f"the uploaded audio cannot be decoded: {error.cause}", "unreadable_audio", "file")
    if isinstance(error, PcmError):
        return bad_request(f"the uploaded audio cannot be used: {error}", "unreadable_audio", "file")
    if isinstance(error, UnsupportedLanguageError):
        return bad_request(str(error), "unsupported_language", "language")
    if isinstance(error, ContextError):
        return bad_request(str(error), "invalid_prompt", "prompt")
    if isinstance(error, MaxNewTokensError):
        return ApiError(422, str(error), "max_new_tokens")
    return ApiError(500, f"internal error ({type(error).__name__}); the server keeps running", "internal_error",
                    type="server_error")


class QueueFullError(RuntimeError):
    """No worker will take the job now; ``retry_after`` is a suggested wait in whole seconds."""

    def __init__(self, retry_after: int, reason: str = "all workers are busy and the queue is full") -> None:
        super().__init__(f"{reason}; retry after {retry_after} s")
        self.retry_after = retry_after


class BodyTooLargeError(Exception):
    """A request body went over the server's upload limit while it was being read."""


class BodyTimeoutError(Exception):
    """A request body did not arrive whole within the server's read timeout."""
