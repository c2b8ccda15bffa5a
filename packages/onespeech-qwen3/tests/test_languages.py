import json

import pytest

from onespeech.qwen3.errors import UnsupportedLanguageError
from onespeech.qwen3.languages import TAG_BY_NAME, Languages


@pytest.fixture(scope="module")
def languages(shared_data) -> Languages:
    config = json.loads((shared_data / "configs" / "Qwen3-ASR-0.6B" / "config.json").read_text())
    return Languages(config["support_languages"])


@pytest.mark.parametrize(
    ("given", "name"),
    [("en", "English"), ("zh", "Chinese"), ("yue", "Cantonese"), ("fr", "French"), ("de", "German"),
     ("EN", "English"), ("english", "English"), ("cHINese", "Chinese"), ("en-US", "English"),
     ("zh_CN", "Chinese"), (" ja ", "Japanese"), ("fil", "Filipino")],
)
def test_tags_and_names_resolve(languages: Languages, given: str, name: str) -> None:
    assert languages.resolve(given) == name


@pytest.mark.parametrize("auto", [None, "", "  "])
def test_none_means_auto(languages: Languages, auto) -> None:
    assert languages.resolve(auto) is None


@pytest.mark.parametrize("bad", ["xx", "Klingon", "tlh", "en-", "sw"])
def test_unsupported_is_refused(languages: Languages, bad: str) -> None:
    with pytest.raises(UnsupportedLanguageError, match="not supported"):
        languages.resolve(bad)


def test_non_string_is_refused(languages: Languages) -> None:
    with pytest.raises(UnsupportedLanguageError, match="tag"):
        languages.resolve(3)  # type: ignore[arg-type]


def test_every_released_language_has_a_tag(languages: Languages) -> None:
    assert len(languages.names) == 30
    assert set(languages.names) == set(TAG_BY_NAME)
    assert languages.tag("English") == "en" and languages.tag("Cantonese") == "yue"
    assert languages.tag(None) is None
    assert languages.tag("Esperanto") == "Esperanto"  # no tag known: the name itself
