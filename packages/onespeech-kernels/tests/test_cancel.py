import concurrent.futures
import threading

import pytest

from onespeech.kernels.cancel import check_cancel, is_cancelled, raise_if_cancelled
from onespeech.kernels.errors import OperationCancelledError


@pytest.mark.parametrize("cancel", [None, threading.Event(), lambda: False])
def test_signals_are_accepted(cancel) -> None:
    check_cancel(cancel)
    assert not is_cancelled(cancel)


@pytest.mark.parametrize("cancel", [True, 1, "stop", object()])
def test_other_values_are_a_type_error(cancel) -> None:
    with pytest.raises(TypeError, match="not a cancellation signal; pass a threading.Event-like object"):
        check_cancel(cancel)


def test_set_signal_raises_the_shared_base() -> None:
    event = threading.Event()
    event.set()
    with pytest.raises(OperationCancelledError, match="download was cancelled") as info:
        raise_if_cancelled(event, "download")
    assert isinstance(info.value, concurrent.futures.CancelledError)
    assert is_cancelled(lambda: True)
