import onespeech.features


def test_package_imports_with_version() -> None:
    assert onespeech.features.__version__ == "0.1.0"
