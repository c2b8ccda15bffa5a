"""Options given as keywords to ``load``: the spec's ``Load(directory, threads: 4)``.

``Qwen3Recognizer.load`` and ``Qwen3ForcedAligner.load`` take an options object or
its fields as keywords (``load(directory, threads=4)``), never both: a keyword beside
an options object would silently lose to one of them.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["options_from"]

OptionsT = TypeVar("OptionsT")


def options_from(cls: type[OptionsT], options: OptionsT | None, caller: str, **keywords: Any) -> OptionsT:
    """``options``, or ``cls(**keywords)`` from the keywords that are not None.

    Raises
    ------
    TypeError
        ``options`` is not a ``cls`` (``load(directory, 4)``), or both ``options``
        and a keyword were given.
    """
    given = {name: value for name, value in keywords.items() if value is not None}
    if options is None:
        return cls(**given)
    if not isinstance(options, cls):
        raise TypeError(f"{caller}: options must be a {cls.__name__} or None, not {type(options).__name__}; "
                        f"give its fields as keywords instead ({', '.join(f'{k}=...' for k in keywords)})")
    if given:
        raise TypeError(f"{caller}: give options= or the keywords {', '.join(f'{k}=' for k in given)}, not both "
                        f"(options={options!r})")
    return options
