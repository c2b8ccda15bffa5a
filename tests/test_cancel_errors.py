"""One cancel helper and one naming style: every layer's cancel error is an OperationCancelledError named *CancelledError."""

from __future__ import annotations

import threading

import pytest

from onespeech.align.errors import AlignmentCancelledError
from onespeech.kernels.cancel import raise_if_cancelled
from onespeech.kernels.errors import OperationCancelledError
from onespeech.qwen3 import RecognitionCancelled, RecognitionCancelledError
from onespeech.qwen3.errors import raise_if_recognition_cancelled as recognition_check
from onespeech.speech import TranscriptionCancelled, TranscriptionCancelledError

ERRORS = [RecognitionCancelledError, AlignmentCancelledError, TranscriptionCancelledError]


@pytest.mark.parametrize("error", ERRORS)
def test_one_base_and_one_name_style(error: type[OperationCancelledError]) -> None:
    assert issubclass(error, OperationCancelledError) and error.__name__.endswith("CancelledError")


def test_the_old_names_are_the_same_classes() -> None:
    assert RecognitionCancelled is RecognitionCancelledError
    assert TranscriptionCancelled is TranscriptionCancelledError


@pytest.mark.parametrize("error", [OperationCancelledError, *ERRORS])
def test_the_one_helper_raises_the_layers_error(error: type[OperationCancelledError]) -> None:
    event = threading.Event()
    raise_if_cancelled(event, "work", error)  # not set: nothing
    event.set()
    with pytest.raises(error, match="^work was cancelled by the caller's signal$"):
        raise_if_cancelled(event, "work", error)
    with pytest.raises(error):
        raise_if_cancelled(lambda: True, "work", error)


def test_the_recognizer_check_is_the_helper() -> None:
    with pytest.raises(RecognitionCancelledError, match="^recognition was cancelled by the caller's signal$"):
        recognition_check(lambda: True)
