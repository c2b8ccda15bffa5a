from __future__ import annotations

import pickle

from onespeech.kernels.errors import ConversionInProgressError, ModelIntegrityError, TensorFileError


def test_integrity_error_names_file_to_remove() -> None:
    e = ModelIntegrityError("/cache/m/layers_00.bin", "size 3 != 10")
    assert "remove /cache/m/layers_00.bin" in str(e) and "size 3 != 10" in str(e)
    assert e.path == "/cache/m/layers_00.bin"
    assert isinstance(TensorFileError("x", "y"), ModelIntegrityError)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_conversion_in_progress_is_oserror_saying_retry() -> None:
    e = ConversionInProgressError("/cache/m", "pid 42")
    assert isinstance(e, OSError)
    assert "retry after the other process completes" in str(e) and "pid 42" in str(e)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
