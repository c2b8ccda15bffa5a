"""Language tags and names of Qwen3-ASR.

The model names its languages in English ("English", "Cantonese"); its released
config lists them under ``support_languages``. Users pass short tags (``en``,
``zh``, ``yue``, BCP-47 forms such as ``en-US``) or the names themselves, in any
case; ``None`` (or an empty string) lets the model identify the language.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from onespeech.qwen3.errors import UnsupportedLanguageError

# ISO 639-1 where one exists; Cantonese has only the 639-3 tag, Filipino 639-2
TAG_BY_NAME: dict[str, str] = {
    "Chinese": "zh",
    "English": "en",
    "Cantonese": "yue",
    "Arabic": "ar",
    "German": "de",
    "French": "fr",
    "Spanish": "es",
    "Portuguese": "pt",
    "Indonesian": "id",
    "Italian": "it",
    "Korean": "ko",
    "Russian": "ru",
    "Thai": "th",
    "Vietnamese": "vi",
    "Japanese": "ja",
    "Turkish": "tr",
    "Hindi": "hi",
    "Malay": "ms",
    "Dutch": "nl",
    "Swedish": "sv",
    "Danish": "da",
    "Finnish": "fi",
    "Polish": "pl",
    "Czech": "cs",
    "Filipino": "fil",
    "Persian": "fa",
    "Greek": "el",
    "Romanian": "ro",
    "Hungarian": "hu",
    "Macedonian": "mk",
}


_BCP47 = re.compile(r"[a-z]{2,3}(?:[-_][a-z0-9]{1,8})+")


class Languages:
    """The languages one model supports, by tag and by name.

    Parameters
    ----------
    names : iterable of str
        The config's ``support_languages`` (canonical names, e.g. ``"English"``).
    owner : str
        Who supports them, for messages (``"this model"``).
    detects : bool
        Whether the owner identifies the language itself when given None.
    """

    def __init__(self, names: Iterable[str], owner: str = "this model", detects: bool = True) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._owner = owner
        self._detects = detects
        self._by_key: dict[str, str] = {}
        for name in self.names:
            self._by_key[name.lower()] = name
            tag = TAG_BY_NAME.get(name)
            if tag is not None:
                self._by_key[tag] = name

    @property
    def tags(self) -> tuple[str, ...]:
        """Short tags of the supported languages that have one."""
        return tuple(TAG_BY_NAME[n] for n in self.names if n in TAG_BY_NAME)

    def resolve(self, language: str | None) -> str | None:
        """The model's name for a tag or name; None (or "") means auto-detect.

        Raises
        ------
        UnsupportedLanguageError
            If the model does not support the language.
        """
        if language is None:
            return None
        if not isinstance(language, str):
            raise UnsupportedLanguageError(
                f"language must be a tag such as 'en' or None, not {type(language).__name__}"
            )
        key = language.strip().lower()
        if not key:
            return None
        name = self._by_key.get(key)
        if name is None and _BCP47.fullmatch(key):
            # BCP-47 forms: en-US, zh_CN -> primary subtag
            name = self._by_key.get(re.split("[-_]", key, maxsplit=1)[0])
        if name is None:
            detect = ", or None to detect it" if self._detects else ""
            raise UnsupportedLanguageError(
                f"language {language!r} is not supported by {self._owner}; use one of "
                f"{', '.join(self.tags)} (or a name such as 'English'){detect}"
            )
        return name

    def tag(self, name: str | None) -> str | None:
        """The short tag for a model language name, or the name itself if it has none."""
        if not name:
            return None
        canonical = self._by_key.get(name.strip().lower(), name.strip())
        return TAG_BY_NAME.get(canonical, canonical)
