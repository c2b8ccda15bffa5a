import onespeech.speech


def test_package_imports_with_version() -> None:
    assert onespeech.speech.__version__ == "0.1.0"
