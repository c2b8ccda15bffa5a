import onespeech.kernels


def test_package_imports_with_version() -> None:
    assert onespeech.kernels.__version__ == "0.1.0"
