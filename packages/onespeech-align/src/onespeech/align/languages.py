"""The forced aligner's languages and the names the publisher's config uses for them."""

from __future__ import annotations

from .errors import LanguageRequiredError, UnsupportedLanguageError

# tag -> the name in the released config's ``support_languages`` (and the reference's
# ``language`` argument).
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


def check_language(language: str | None) -> str:
    """Return ``language`` if the aligner supports it, else raise.

    Raises
    ------
    LanguageRequiredError
        ``language`` is None or empty.
    UnsupportedLanguageError
        ``language`` is not one of the eleven tags (exact, lower case).
    """
    if language is None or language == "":
        raise LanguageRequiredError(
            f"forced alignment needs a language tag; use one of {', '.join(ALIGNER_LANGUAGES)}"
        )
    if not isinstance(language, str) or language not in ALIGNER_LANGUAGES:
        raise UnsupportedLanguageError(
            f"language {language!r} is not supported by Qwen3-ForcedAligner; "
            f"supported tags: {', '.join(ALIGNER_LANGUAGES)}"
        )
    return language
