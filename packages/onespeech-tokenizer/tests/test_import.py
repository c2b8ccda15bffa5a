import onespeech.tokenizer


def test_package_imports_with_version() -> None:
    assert onespeech.tokenizer.__version__ == "0.1.0"
