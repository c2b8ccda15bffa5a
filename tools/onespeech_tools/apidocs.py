"""The API reference in docs/api/: one page per distribution, generated from `__all__`.

For each of the six packages, the package and every public submodule (no part of its
dotted name starts with ``_``) that defines ``__all__`` gets a section; each name in that
``__all__`` gets its kind, its signature (dataclass fields, enum members) and its
docstring: the first paragraph plus the numpy-style Parameters, Attributes, Returns,
Yields and Raises sections as written. A name exported from several modules is written
out once, where its own package exports it first (the package before its submodules),
and referred to elsewhere.

What counts as documented (`undocumented` lists the rest; tools/tests/test_apidocs.py
fails on it):
- a class or function: its own docstring (a dataclass's generated one does not count);
- any other name (a constant, a type alias): a ``#:`` comment on the lines directly
  above its assignment, or after the assignment on its first line, in the module that
  assigns it (``from .x import NAME`` re-exports are followed). This is the comment
  Sphinx's autodoc reads; prose in the module docstring does not count, since nothing
  can check which name it describes;
- a module: its docstring.

The output is deterministic so that the test can compare bytes: names are sorted,
values are shown without memory addresses, and paths inside a package are shown
relative to it (``<onespeech.features>/catalog``). The generator refuses to write a page
that would still hold an address or a path of this machine.

Uses only the standard library (importlib, inspect, ast, tokenize): it imports the
packages as installed or on ``PYTHONPATH``, so run it from the development environment.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import importlib
import importlib.util
import inspect
import io
import os
import pkgutil
import re
import sys
import tokenize
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["PACKAGES", "Entry", "collect", "main", "render_pages", "undocumented", "write_pages"]

#: The documented packages, lowest layer first; each gets ``docs/api/<name>.md``.
PACKAGES = ("tokenizer", "kernels", "features", "qwen3", "align", "speech")

# docstring sections copied as written, in numpy style (a title underlined with dashes)
_SECTIONS = ("Parameters", "Attributes", "Returns", "Yields", "Raises")
# a shown value longer than this is summarized by its type and size
_MAX_VALUE = 100
# a signature longer than this is written one parameter per line
_MAX_LINE = 88


@dataclasses.dataclass(frozen=True)
class Entry:
    """One name of one module's ``__all__``.

    Attributes
    ----------
    module : str
        The public module whose ``__all__`` holds the name (``onespeech.kernels.cpu``).
    name : str
        The name as exported.
    obj : object
        The exported object.
    origin : tuple[str, str]
        Where it is defined: (module, qualified name) for classes and functions, the
        module that assigns it and its name for anything else.
    """

    module: str
    name: str
    obj: Any
    origin: tuple[str, str]

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


# ---------------------------------------------------------------- collecting the names


def public_modules(package: str) -> list[ModuleType]:
    """The package and its public submodules that define ``__all__``, package first.

    A submodule that fails to import stops the run: skipping it would make the pages
    depend on which optional dependencies happen to be installed.
    """
    root = importlib.import_module(f"onespeech.{package}")
    modules = [root]
    names = [info.name for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".", onerror=_raise)]
    for name in sorted(names):
        if any(part.startswith("_") for part in name.split(".")):
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(
                f"{name} needs {e.name}, which is not installed; the API reference is generated from a "
                "development install with every extra (onespeech-speech[server])"
            ) from e
        if hasattr(module, "__all__"):
            modules.append(module)
    return modules


def _raise(name: str) -> None:
    raise ImportError(f"cannot import {name} while listing its package's modules")


def collect(packages: tuple[str, ...] = PACKAGES) -> dict[str, list[tuple[ModuleType, list[Entry]]]]:
    """Every public module of each package with the entries of its ``__all__``, sorted."""
    pages: dict[str, list[tuple[ModuleType, list[Entry]]]] = {}
    for package in packages:
        sections = []
        for module in public_modules(package):
            names = sorted(module.__all__, key=lambda n: (n.lower(), n))
            entries = [Entry(module.__name__, n, getattr(module, n), _origin(module, n)) for n in names]
            sections.append((module, entries))
        pages[package] = sections
    return pages


def _origin(module: ModuleType, name: str) -> tuple[str, str]:
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        return (getattr(obj, "__module__", module.__name__), getattr(obj, "__qualname__", name))
    return _assigning_module(module.__name__, name)


def _assigning_module(module_name: str, name: str, depth: int = 0) -> tuple[str, str]:
    """Follows ``from .x import NAME`` to the module whose top level assigns NAME."""
    tree = _module_ast(module_name)
    if tree is None or depth > 10:
        return (module_name, name)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    base = "." * node.level + (node.module or "")
                    package = module_name if _is_package(module_name) else module_name.rpartition(".")[0]
                    source = importlib.util.resolve_name(base, package) if node.level else base
                    return _assigning_module(source, alias.name, depth + 1)
    return (module_name, name)


def _is_package(module_name: str) -> bool:
    return hasattr(sys.modules.get(module_name), "__path__")


_SOURCES: dict[str, tuple[ast.Module, list[str], dict[int, str]] | None] = {}


def _parsed(module_name: str) -> tuple[ast.Module, list[str], dict[int, str]] | None:
    """The module's syntax tree, its lines and its comments by line number (cached)."""
    if module_name not in _SOURCES:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        file = getattr(module, "__file__", None)
        if file is None or not file.endswith(".py"):
            _SOURCES[module_name] = None
        else:
            text = Path(file).read_text(encoding="utf-8")
            comments = {
                tok.start[0]: tok.string
                for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT
            }
            _SOURCES[module_name] = (ast.parse(text), text.splitlines(), comments)
    return _SOURCES[module_name]


def _module_ast(module_name: str) -> ast.Module | None:
    parsed = _parsed(module_name)
    return None if parsed is None else parsed[0]


# ---------------------------------------------------------------- reading the documentation


def own_doc(obj: Any, origin: tuple[str, str]) -> str | None:
    """The documentation written for the object itself, cleaned; None when there is none."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        if dataclasses.is_dataclass(obj) and doc and doc.startswith(obj.__name__ + "("):
            return None  # the constructor signature dataclasses writes for undocumented classes
        if isinstance(obj, enum.EnumMeta) and doc == "An enumeration.":
            return None
    elif inspect.isroutine(obj):
        doc = getattr(obj, "__doc__", None)
    else:
        doc = _comment_doc(*origin)
    if not doc or not doc.strip():
        return None
    return inspect.cleandoc(doc)


def _comment_doc(module_name: str, name: str) -> str | None:
    """The ``#:`` comment documenting the top-level assignment of NAME, if any."""
    parsed = _parsed(module_name)
    if parsed is None:
        return None
    tree, lines, comments = parsed
    for node in tree.body:
        if name not in _assigned_names(node):
            continue
        above = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].lstrip().startswith("#:") and line in comments:
            above.append(lines[line - 1].lstrip()[2:].strip())
            line -= 1
        if above:
            return "\n".join(reversed(above))
        trailing = comments.get(node.lineno, "")
        if trailing.startswith("#:"):
            return trailing[2:].strip()
        return None
    return None


def _assigned_names(node: ast.stmt) -> list[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    names = []
    for target in targets:
        elements = target.elts if isinstance(target, ast.Tuple) else [target]
        names += [e.id for e in elements if isinstance(e, ast.Name)]
    return names


def first_paragraph(doc: str) -> str:
    lines = []
    for line in doc.splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)


def sections(doc: str) -> list[str]:
    """The Parameters/Attributes/Returns/Yields/Raises sections, each as written."""
    lines = doc.splitlines()
    titles = [
        i
        for i in range(len(lines) - 1)
        if lines[i].strip() and re.fullmatch(r"\s*-{3,}\s*", lines[i + 1])
    ]
    found = []
    for n, start in enumerate(titles):
        if lines[start].strip() not in _SECTIONS:
            continue
        end = titles[n + 1] if n + 1 < len(titles) else len(lines)
        found.append("\n".join(lines[start:end]).rstrip())
    return found


def undocumented(pages: dict[str, list[tuple[ModuleType, list[Entry]]]] | None = None) -> list[str]:
    """Every public module without a docstring and every ``__all__`` name without documentation.

    A name is listed once, under the first module that exports it, with what to add.
    """
    pages = collect() if pages is None else pages
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    for sections_ in pages.values():
        for module, entries in sections_:
            if not (module.__doc__ or "").strip():
                missing.append(f"{module.__name__} (module): add a module docstring")
            for entry in entries:
                if entry.origin in seen:
                    continue
                seen.add(entry.origin)
                if own_doc(entry.obj, entry.origin) is None:
                    missing.append(f"{entry.path} ({_kind(entry.obj)}): {_remedy(entry)}")
    return missing


def _remedy(entry: Entry) -> str:
    if inspect.isclass(entry.obj) or inspect.isroutine(entry.obj):
        return "add a docstring"
    module, name = entry.origin
    return f"add a `#:` comment above `{name} = ...` in {module}"


# ---------------------------------------------------------------- showing values and signatures


class _Shown:
    """Stands in for a default value or annotation so that a Signature prints our text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _package_roots() -> list[tuple[str, str]]:
    """(directory, label) of every onespeech package, deepest first."""
    roots = []
    for package in PACKAGES:
        module = sys.modules.get(f"onespeech.{package}")
        for directory in getattr(module, "__path__", []):
            roots.append((str(Path(directory).resolve()), f"<onespeech.{package}>"))
    return sorted(roots, key=lambda r: -len(r[0]))


def show_path(path: Path) -> str:
    resolved = str(path.resolve()) if path.is_absolute() else str(path)
    for directory, label in _package_roots():
        if resolved == directory or resolved.startswith(directory + os.sep):
            return "Path(" + repr(label + resolved[len(directory) :]) + ")"
    if path.is_absolute():
        return "Path(<absolute path>)"
    return f"Path({str(path)!r})"


def show_value(value: Any) -> str:
    """A deterministic, machine-independent text for a constant or default value.

    A mutable container (list, dict, set) is shown by its type only: what it holds can
    change while a program runs (``cli.COMMANDS`` is filled when a parser is built), and
    the page must not depend on what ran before it was written.
    """
    if isinstance(value, (list, dict, set)):
        return f"<{type(value).__name__}>"
    text = _show(value)
    if len(text) <= _MAX_VALUE:
        return text
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return f"<{type(value).__name__}>"


def _show(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, Path):
        return show_path(value)
    if isinstance(value, tuple):
        items = [_show(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, (set, frozenset)):
        items = sorted(_show(v) for v in value)
        if not items:
            return f"{type(value).__name__}()"
        return ("{" + ", ".join(items) + "}") if isinstance(value, set) else f"frozenset({{{', '.join(items)}}})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value.items()) + "}"
    if inspect.isclass(value) or inspect.isroutine(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
    if _is_type_alias(value):
        return _strip_typing(repr(value))
    if dataclasses.is_dataclass(value):
        return _show_dataclass(value)
    return f"<{type(value).__name__} object>"


def _show_dataclass(value: Any) -> str:
    """``Name(field=value, ...)`` with the fields that differ from their defaults."""
    shown = []
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if f.default is not dataclasses.MISSING and current == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and current == f.default_factory():
            continue
        shown.append(f"{f.name}={_show(current)}")
    return f"{type(value).__name__}({', '.join(shown)})"


def _is_type_alias(value: Any) -> bool:
    # `X | Y`, `list[int]`, `Callable[[int], str]` and the typing module's aliases
    return isinstance(value, (types.UnionType, types.GenericAlias)) or type(value).__module__ == "typing"


def _strip_typing(text: str) -> str:
    return text.replace("typing.", "").replace("collections.abc.", "")


def _annotation(annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty:
        return annotation
    # every module uses `from __future__ import annotations`: the text as written
    return _Shown(annotation if isinstance(annotation, str) else _strip_typing(inspect.formatannotation(annotation)))


def signature(obj: Any, name: str, prefix: str = "def ", wrap: bool = True) -> str | None:
    """``def name(params) -> ret`` with defaults shown by `show_value`; None if unavailable.

    A method's ``self`` is left out; with ``wrap``, a long signature gets one parameter
    per line.
    """
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    if inspect.isfunction(obj) and "." in obj.__qualname__ and next(iter(sig.parameters), "") == "self":
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    params = [
        p.replace(
            annotation=_annotation(p.annotation),
            default=p.default if p.default is inspect.Parameter.empty else _Shown(_show_default(obj, p.default)),
        )
        for p in sig.parameters.values()
    ]
    sig = sig.replace(parameters=params, return_annotation=_annotation(sig.return_annotation))
    if prefix == "class ":
        sig = sig.replace(return_annotation=inspect.Signature.empty)
    text = f"{prefix}{name}{sig}"
    if not wrap or len(text) <= _MAX_LINE or len(params) == 0:
        return text
    # one parameter per line: split the printed list at the top-level commas
    inner = str(sig.replace(return_annotation=inspect.Signature.empty))[1:-1]
    ret = "" if sig.return_annotation is inspect.Signature.empty else f" -> {sig.return_annotation!r}"
    return f"{prefix}{name}(\n" + "".join(f"    {p},\n" for p in _split_top(inner)) + f"){ret}"


def _show_default(obj: Any, default: Any) -> str:
    text = show_value(default)
    if not text.endswith(" object>"):
        return text
    # a sentinel such as `_UNSET = object()`: its name in the defining module says more
    module = sys.modules.get(getattr(inspect.unwrap(obj), "__module__", "") or "")
    for name, value in sorted(vars(module).items()) if module else []:
        if value is default:
            return name
    return text


def _split_top(text: str) -> list[str]:
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


# ---------------------------------------------------------------- writing the pages


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return "exception"
        if issubclass(obj, enum.Enum):
            return "enum"
        if dataclasses.is_dataclass(obj):
            return "dataclass"
        if getattr(obj, "_is_protocol", False):
            return "protocol"
        return "class"
    if inspect.isroutine(obj):
        return "function"
    if _is_type_alias(obj):
        return "type alias"
    return "constant"


def _bases(cls: type) -> str:
    names = [b.__name__ for b in cls.__bases__ if b is not object and b.__name__ not in ("Protocol", "Generic")]
    return f"({', '.join(names)})" if names else ""


def _fence(text: str, lang: str = "python") -> list[str]:
    return [f"```{lang}", text, "```", ""]


def _doc_lines(doc: str | None) -> list[str]:
    if doc is None:
        return ["*Undocumented.*", ""]
    out = [first_paragraph(doc), ""]
    for section in sections(doc):
        out += _fence(section, "text")
    return out


def _class_lines(cls: type) -> list[str]:
    kind = _kind(cls)
    out: list[str] = []
    if kind == "dataclass":
        frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        out += _fence(("@dataclass(frozen=True)\n" if frozen else "@dataclass\n") + f"class {cls.__name__}{_bases(cls)}")
    elif kind in ("class",) and _own_init(cls):
        out += _fence(signature(cls, cls.__name__, "class ") or f"class {cls.__name__}{_bases(cls)}")
    else:
        out += _fence(f"class {cls.__name__}{_bases(cls)}")
    out += _doc_lines(own_doc(cls, ("", "")))
    if kind == "dataclass":
        out += ["| field | type | default |", "| --- | --- | --- |"]
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            out.append(f"| `{f.name}` | `{_cell(_type_text(f.type))}` | {_field_default(f)} |")
        out.append("")
    if kind == "enum":
        out += ["| member | value |", "| --- | --- |"]
        for member in cls.__members__.values():  # type: ignore[attr-defined]
            out.append(f"| `{member.name}` | `{_cell(show_value(member.value))}` |")
        out.append("")
    members = list(_public_members(cls))
    if members:
        out += [f"- {line}" for line in members] + [""]
    return out


def _own_init(cls: type) -> bool:
    return any(
        ("__init__" in vars(c) or "__new__" in vars(c)) and c.__module__.startswith("onespeech.")
        for c in cls.__mro__
    )


def _type_text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else _strip_typing(inspect.formatannotation(annotation))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _field_default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{_cell(show_value(f.default))}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{_cell(getattr(f.default_factory, '__qualname__', 'factory'))}()`"
    return "required"


def _public_members(cls: type) -> Iterator[str]:
    """Public methods and properties defined by onespeech classes, in definition order."""
    seen: set[str] = set()
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for owner in cls.__mro__:
        if not owner.__module__.startswith("onespeech."):
            continue
        for name, raw in vars(owner).items():
            if name.startswith("_") or name in seen or name in fields:
                continue
            seen.add(name)
            line = _member_line(cls, name, raw)
            if line is not None:
                yield line


def _member_line(cls: type, name: str, raw: Any) -> str | None:
    if isinstance(raw, property):
        ret = inspect.signature(raw.fget).return_annotation if raw.fget else inspect.Signature.empty
        shown = "" if ret is inspect.Signature.empty else f" -> {_type_text(ret)}"
        return f"`{name}{shown}` (property): {_summary(raw.fget)}"
    if isinstance(raw, (classmethod, staticmethod)):
        kind = "classmethod" if isinstance(raw, classmethod) else "staticmethod"
        func = getattr(cls, name)
        return f"`{signature(func, name, '', wrap=False)}` ({kind}): {_summary(raw.__func__)}"
    if inspect.isfunction(raw):
        return f"`{signature(raw, name, '', wrap=False)}`: {_summary(raw)}"
    return None


def _summary(func: Callable[..., Any] | None) -> str:
    doc = inspect.getdoc(func) if func is not None and func.__doc__ else None
    return first_paragraph(doc) if doc else "*undocumented*"


def _entry_lines(entry: Entry) -> list[str]:
    obj, kind = entry.obj, _kind(entry.obj)
    out = [f"### `{entry.name}`", "", f"*{kind}*", ""]
    if inspect.isclass(obj):
        return out + _class_lines(obj)
    if inspect.isroutine(obj):
        out += _fence(signature(obj, entry.name) or f"def {entry.name}(...)")
    else:
        out += _fence(f"{entry.name} = {show_value(obj)}")
    return out + _doc_lines(own_doc(obj, entry.origin))


def _home(pages: dict[str, list[tuple[ModuleType, list[Entry]]]]) -> dict[tuple[str, str], Entry]:
    """Where each object is written out: its first export by the package that defines it."""
    home: dict[tuple[str, str], Entry] = {}
    for sections_ in pages.values():
        for _, entries in sections_:
            for entry in entries:
                current = home.get(entry.origin)
                if current is None or (_owned(entry) and not _owned(current)):
                    home[entry.origin] = entry
    return home


def _package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _owned(entry: Entry) -> bool:
    package = _package_of(entry.module)
    return entry.origin[0] == package or entry.origin[0].startswith(package + ".")


def render_pages(pages: dict[str, list[tuple[ModuleType, list[Entry]]]] | None = None) -> dict[str, str]:
    """File name -> text of every page, index.md included."""
    pages = collect() if pages is None else pages
    home = _home(pages)
    texts: dict[str, str] = {}
    for package, sections_ in pages.items():
        out = [
            f"# `onespeech.{package}`",
            "",
            "<!-- generated by `python -m onespeech_tools.apidocs --out docs/api`; do not edit -->",
            "",
            "Modules: " + ", ".join(f"`{m.__name__}`" for m, _ in sections_) + ".",
            "",
        ]
        for module, entries in sections_:
            out += [f"## `{module.__name__}`", "", first_paragraph(inspect.cleandoc(module.__doc__ or "")), ""]
            elsewhere = []
            for entry in entries:
                written = home[entry.origin]
                if written is entry:
                    out += _entry_lines(entry)
                else:
                    page = _package_of(written.module).split(".")[1]
                    link = f"`{written.path}`" + ("" if page == package else f" ([{page}.md]({page}.md))")
                    elsewhere.append(f"- `{entry.name}`: {_kind(entry.obj)}, see {link}")
            if elsewhere:
                out += ["Also exported here:", ""] + elsewhere + [""]
        texts[f"{package}.md"] = _finish(out, package)
    texts["index.md"] = _index(pages)
    return texts


def _index(pages: dict[str, list[tuple[ModuleType, list[Entry]]]]) -> str:
    out = [
        "# API reference",
        "",
        "<!-- generated by `python -m onespeech_tools.apidocs --out docs/api`; do not edit -->",
        "",
        "The public names of each distribution (each module's `__all__`), lowest layer first,",
        "generated from the code: signatures, dataclass fields, enum members and docstrings.",
        "",
    ]
    for package, sections_ in pages.items():
        root = sections_[0][0]
        summary = first_paragraph(inspect.cleandoc(root.__doc__ or ""))
        out.append(f"- [`onespeech.{package}`]({package}.md): {summary}")
    return _finish(out + [""], "index")


def _finish(lines: list[str], page: str) -> str:
    text = "\n".join(lines).rstrip("\n") + "\n"
    text = re.sub(r"\n{3,}", "\n\n", text)
    address = re.search(r"\bat 0x[0-9a-fA-F]+", text)
    if address:
        raise ValueError(f"the {page} page would hold a memory address: {text[address.start() - 60 : address.end()]!r}")
    for directory in {sys.prefix, str(Path.home()), str(Path.cwd())} - {"", "/"}:
        if directory in text:
            raise ValueError(f"the {page} page would hold the path {directory!r}; show the value with show_value")
    return text


def write_pages(out: Path) -> list[Path]:
    """Writes every page into ``out`` (created if missing) and returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_pages().items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m onespeech_tools.apidocs --out docs/api``: regenerates the API pages."""
    parser = argparse.ArgumentParser(prog="python -m onespeech_tools.apidocs", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the pages (docs/api)")
    args = parser.parse_args(argv)
    for path in write_pages(args.out):
        print(path)
    missing = undocumented()
    if missing:
        print(f"{len(missing)} public names have no documentation:", file=sys.stderr)
        for line in missing:
            print(f"  {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
