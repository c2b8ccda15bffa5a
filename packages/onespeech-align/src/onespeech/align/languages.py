"""The forced aligner's languages, parsed as the recognizer parses its own.

Tags, names and BCP-47 forms are read by :class:`onespeech.qwen3.Languages`
(``"en"``, ``"EN"``, ``"English"`` and ``"en-US"`` all mean English); unlike the
recognizer, the aligner cannot identify the language, so one is required.
"""

from __future__ import annotations

from onespeech.qwen3 import Languages

from .errors import LanguageRequiredError

#: Language tag -> its name in the released config's ``support_languages`` (and the reference's
#: ``language`` argument).
ALIGNER_LANGUAGES: dict[str, str] = {
    "zh": "Chinese",
    "en": "English",
    "yue": "Cantonese",
    "fr": "French",
    "de": "German",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "pt": "Portuguese",
    "ru": "Russian",
    "es": "Spanish",
}

_LANGUAGES = Languages(ALIGNER_LANGUAGES.values(), owner="Qwen3-ForcedAligner", detects=False)


def check_language(language: str | None) -> str:
    """The short tag of ``language`` if the aligner supports it, else raise.

    Raises
    ------
    LanguageRequiredError
        ``language`` is None or empty.
    onespeech.qwen3.UnsupportedLanguageError
        ``language`` is not one of the eleven languages (by tag, name or BCP-47 form).
    """
    name = _LANGUAGES.resolve(language)
    if name is None:
        raise LanguageRequiredError(
            f"forced alignment needs a language tag; use one of {', '.join(ALIGNER_LANGUAGES)}"
        )
    return _LANGUAGES.tag(name) or name  # every aligner language has a tag


def is_aligner_language(language: str | None) -> bool:
    """True if ``language`` names one of the aligner's languages."""
    try:
        return _LANGUAGES.resolve(language) is not None
    except ValueError:
        return False
