import onespeech.qwen3


def test_package_imports_with_version() -> None:
    assert onespeech.qwen3.__version__ == "0.1.0"
