import onespeech.align


def test_package_imports_with_version() -> None:
    assert onespeech.align.__version__ == "0.1.0"
