"""The model catalog: pinned publisher files and runtime-file digests, as data.

Each model the library knows is one JSON file shipped with the package that handles
its kind (``onespeech/qwen3/catalog/`` for ``asr`` and ``aligner``,
``onespeech/features/catalog/`` for ``vad``), found through
:func:`onespeech.kernels.registry.catalog_dirs`. An entry pins the publisher repository and revision (a
commit id), every publisher file's size and SHA-256, the licence, and per precision
(``fp32``, ``bf16``) the runtime files our converter produces. A pin that could not
be established is written down as unknown with a reason (``sha256: null`` +
``unknown_reason``; a runtime precision with ``status: "unreproducible"``) rather
than invented; ``probe`` lists them. :func:`validate_catalog_data` is the schema;
the tests run it over every file.

Schema ``onespeech-catalog/1``::

    {"schema": "onespeech-catalog/1", "id": "Qwen/Qwen3-ASR-0.6B", "kind": "asr"|"aligner"|"vad"|"speaker",
     "license": str, "license_url": str, "provenance": str, "default": bool (optional),
     "source": {"type": "huggingface", "repo": "owner/name", "revision": "<40 hex>",
                "files": {name: {"size": int|null, "sha256": hex|null, "required": bool,
                                 "unknown_reason": str (when size or sha256 is null)}}}
             | {"type": "pypi-wheel", "package": str, "version": str,
                "wheel": {"name": str, "size": int, "sha256": hex, "url": "https://..." (optional)},
                "files": {name: {..., "member": path inside the wheel}}},
     "runtime": {"fp32"|"bf16": {"status": "pinned", "converter": str,
                                   "files": {name: {"size": int, "sha256": hex}}}
                             | {"status": "unreproducible"|"not-converted", "reason": str, "files": null}}}
"""

from __future__ import annotations

import os
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onespeech.kernels.errors import CatalogError, UnknownModelError, UnsafeFileNameError
from onespeech.kernels.jsonfile import loads_json
from onespeech.kernels.registry import catalog_dirs
from onespeech.kernels.store import FileDigest, check_relative_name, check_repo_id

SCHEMA = "onespeech-catalog/1"
CATALOG_ENV = "ONESPEECH_CATALOG_DIR"
KINDS = ("asr", "aligner", "vad", "speaker")
PRECISIONS = ("fp32", "bf16")
RUNTIME_STATUSES = ("pinned", "unreproducible", "not-converted")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class PublisherFile:
    """One publisher file of a catalogued model."""

    name: str
    size: int | None
    sha256: str | None
    required: bool  # needed to convert/run; optional files (README) are catalogued only
    unknown_reason: str | None = None  # why size or sha256 is not pinned
    member: str | None = None  # path inside the wheel (pypi-wheel sources)

    @property
    def pin(self) -> FileDigest | None:
        """The full pin, or None when part of it is unknown."""
        if self.size is None or self.sha256 is None:
            return None
        return FileDigest(self.size, self.sha256)


@dataclass(frozen=True)
class RuntimePins:
    """The runtime files of one precision, or why they are not pinned."""

    precision: str
    status: str  # "pinned" | "unreproducible" | "not-converted"
    files: dict[str, FileDigest] | None
    reason: str | None = None
    converter: str | None = None


@dataclass(frozen=True)
class CatalogEntry:
    """One model: where its publisher files come from and what they and our outputs hash to."""

    id: str
    kind: str
    license: str
    source_type: str  # "huggingface" | "pypi-wheel"
    repo: str | None  # Hugging Face repository id
    revision: str | None  # commit id (huggingface) or package version (pypi-wheel)
    files: tuple[PublisherFile, ...]
    runtime: dict[str, RuntimePins]
    provenance: str = ""
    license_url: str | None = None
    default: bool = False
    package: str | None = None  # PyPI distribution (pypi-wheel sources)
    wheel: PublisherFile | None = None  # the pinned wheel (pypi-wheel sources)
    wheel_url: str | None = None  # where the wheel is downloaded from (pypi-wheel sources)
    path: Path | None = field(default=None, compare=False)  # the JSON file it came from

    @property
    def hub_location(self) -> tuple[str, str]:
        """(repository, revision) of a Hugging Face entry.

        Raises
        ------
        ValueError
            The entry comes from another kind of source.
        """
        if self.source_type != "huggingface" or self.repo is None or self.revision is None:
            raise ValueError(f"{self.id} comes from a {self.source_type} source; only Hub models are cached here")
        return self.repo, self.revision

    def file(self, name: str) -> PublisherFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"{self.id} has no publisher file {name!r}")

    def required_pins(self) -> dict[str, FileDigest]:
        """name -> pin of every required publisher file.

        Raises
        ------
        CatalogError
            If a required file's pin is unknown (it could not be verified).
        """
        pins = {}
        for f in self.files:
            if not f.required:
                continue
            if f.pin is None:
                raise CatalogError(
                    f"{self.id}: required file {f.name} has no full pin ({f.unknown_reason}); "
                    "it cannot be fetched and verified"
                )
            pins[f.name] = f.pin
        return pins

    def unknown_pins(self) -> list[str]:
        """Human-readable list of every pin this entry lacks (for ``probe``)."""
        out = [f"{f.name}: {f.unknown_reason}" for f in self.files if f.pin is None]
        out += [
            f"runtime {p.precision}: {p.status} ({p.reason})"
            for p in self.runtime.values()
            if p.status == "unreproducible"
        ]
        return out


# -- schema ------------------------------------------------------------------------
def _fail(source: str, where: str, problem: str) -> CatalogError:
    return CatalogError(f"catalog {source}: {where}: {problem}")


def _require(cond: object, source: str, where: str, problem: str) -> None:
    if not cond:
        raise _fail(source, where, problem)


def _check_keys(obj: Any, source: str, where: str, required: set[str], optional: AbstractSet[str] = frozenset()) -> None:
    _require(isinstance(obj, dict), source, where, "must be an object")
    missing, extra = required - obj.keys(), obj.keys() - required - optional
    _require(not missing, source, where, f"missing key(s) {sorted(missing)}")
    _require(not extra, source, where, f"unknown key(s) {sorted(extra)}; allowed {sorted(required | optional)}")


def _check_str(value: Any, source: str, where: str) -> None:
    _require(isinstance(value, str) and value.strip() != "", source, where, "must be a non-empty string")


def _check_digest(obj: dict, source: str, where: str, nullable: bool) -> None:
    size, sha = obj.get("size"), obj.get("sha256")
    if nullable and (size is None or sha is None):
        _check_str(obj.get("unknown_reason"), source, f"{where}.unknown_reason")
    ok_size = (size is None and nullable) or (isinstance(size, int) and not isinstance(size, bool) and size >= 0)
    _require(ok_size, source, f"{where}.size", f"must be a byte count >= 0{' or null' if nullable else ''}")
    ok_sha = (sha is None and nullable) or (isinstance(sha, str) and _SHA256_RE.match(sha) is not None)
    _require(ok_sha, source, f"{where}.sha256", "must be 64 lowercase hex digits" + (" or null" if nullable else ""))


def _check_name(name: Any, source: str, where: str) -> None:
    try:
        check_relative_name(name)
    except UnsafeFileNameError as e:
        raise _fail(source, where, str(e)) from e


def _check_source(src: Any, source: str) -> None:
    _require(isinstance(src, dict), source, "source", "must be an object")
    kind = src.get("type")
    if kind == "huggingface":
        _check_keys(src, source, "source", {"type", "repo", "revision", "files"})
        try:
            check_repo_id(src["repo"])
        except ValueError as e:
            raise _fail(source, "source.repo", str(e)) from e
        _require(
            isinstance(src["revision"], str) and _COMMIT_RE.match(src["revision"]) is not None,
            source, "source.revision", "must be a 40-hex commit id (a pin, not a branch)",
        )  # fmt: skip
        file_optional = {"unknown_reason"}
    elif kind == "pypi-wheel":
        _check_keys(src, source, "source", {"type", "package", "version", "wheel", "files"})
        _check_str(src["package"], source, "source.package")
        _check_str(src["version"], source, "source.version")
        _check_keys(src["wheel"], source, "source.wheel", {"name", "size", "sha256"}, {"url"})
        _check_name(src["wheel"]["name"], source, "source.wheel.name")
        url = src["wheel"].get("url")
        _require(
            url is None or (isinstance(url, str) and url.startswith(("https://", "http://"))),
            source, "source.wheel.url", "must be an http(s) URL",
        )  # fmt: skip
        _check_digest(src["wheel"], source, "source.wheel", nullable=False)
        file_optional = {"unknown_reason", "member"}
    else:
        raise _fail(source, "source.type", f"{kind!r} is not one of 'huggingface', 'pypi-wheel'")
    files = src["files"]
    _require(isinstance(files, dict) and files, source, "source.files", "must be a non-empty object")
    for name, f in files.items():
        where = f"source.files[{name!r}]"
        _check_name(name, source, where)
        _check_keys(f, source, where, {"size", "sha256", "required"}, file_optional)
        _require(isinstance(f["required"], bool), source, f"{where}.required", "must be true or false")
        _check_digest(f, source, where, nullable=True)
        if kind == "pypi-wheel":
            _check_name(f.get("member"), source, f"{where}.member")


def _check_runtime(runtime: Any, source: str) -> None:
    _require(isinstance(runtime, dict) and runtime, source, "runtime", "must be a non-empty object")
    for precision, pins in runtime.items():
        where = f"runtime[{precision!r}]"
        _require(precision in PRECISIONS, source, where, f"precision must be one of {PRECISIONS}")
        _check_keys(pins, source, where, {"status", "files"}, {"reason", "converter"})
        status = pins["status"]
        _require(status in RUNTIME_STATUSES, source, f"{where}.status", f"must be one of {RUNTIME_STATUSES}")
        if status == "pinned":
            _check_str(pins.get("converter"), source, f"{where}.converter")
            files = pins["files"]
            _require(isinstance(files, dict) and files, source, f"{where}.files", "must list the runtime files")
            for name, f in files.items():
                _check_name(name, source, f"{where}.files[{name!r}]")
                _check_keys(f, source, f"{where}.files[{name!r}]", {"size", "sha256"})
                _check_digest(f, source, f"{where}.files[{name!r}]", nullable=False)
        else:
            _require(pins["files"] is None, source, f"{where}.files", f"must be null when status is {status!r}")
            _check_str(pins.get("reason"), source, f"{where}.reason")


def validate_catalog_data(data: Any, source: str = "<data>") -> None:
    """Check ``data`` (a parsed catalog file) against schema ``onespeech-catalog/1``.

    Raises
    ------
    CatalogError
        Naming ``source``, the offending field and what is allowed.
    """
    _check_keys(
        data, source, "top level",
        {"schema", "id", "kind", "license", "source", "runtime", "provenance"}, {"license_url", "default"},
    )  # fmt: skip
    _require(data["schema"] == SCHEMA, source, "schema", f"must be {SCHEMA!r}")
    _check_str(data["id"], source, "id")
    _require(data["kind"] in KINDS, source, "kind", f"must be one of {KINDS}")
    _check_str(data["license"], source, "license")
    _check_str(data["provenance"], source, "provenance")
    _require(isinstance(data.get("default", False), bool), source, "default", "must be true or false")
    _check_source(data["source"], source)
    if data["source"]["type"] == "huggingface":
        _require(data["id"] == data["source"]["repo"], source, "id", "must equal source.repo for Hub models")
    _check_runtime(data["runtime"], source)


# -- loading -----------------------------------------------------------------------
def entry_from_data(data: Any, source: str = "<data>", path: Path | None = None) -> CatalogEntry:
    """Validate ``data`` and build a :class:`CatalogEntry` (used for custom entries too)."""
    validate_catalog_data(data, source)
    src = data["source"]
    files = tuple(
        PublisherFile(
            name, f["size"], f["sha256"], f["required"], f.get("unknown_reason"), f.get("member")
        )
        for name, f in src["files"].items()
    )
    runtime = {
        p: RuntimePins(
            p, r["status"],
            {n: FileDigest(v["size"], v["sha256"]) for n, v in r["files"].items()} if r["files"] else None,
            r.get("reason"), r.get("converter"),
        )
        for p, r in data["runtime"].items()
    }  # fmt: skip
    hub = src["type"] == "huggingface"
    wheel = None if hub else src["wheel"]
    return CatalogEntry(
        id=data["id"], kind=data["kind"], license=data["license"], source_type=src["type"],
        repo=src["repo"] if hub else None, revision=src["revision"] if hub else src["version"],
        files=files, runtime=runtime, provenance=data["provenance"], license_url=data.get("license_url"),
        default=data.get("default", False), package=None if hub else src["package"], path=path,
        wheel=None if wheel is None else PublisherFile(wheel["name"], wheel["size"], wheel["sha256"], True),
        wheel_url=None if wheel is None else wheel.get("url"),
    )  # fmt: skip


def load_entry(path: str | os.PathLike[str]) -> CatalogEntry:
    """Read and validate one catalog file."""
    path = Path(path)
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CatalogError(f"catalog {path}: not valid JSON ({e})") from e
    return entry_from_data(data, str(path), path)


def _load_dirs(directories: list[Path]) -> dict[str, CatalogEntry]:
    entries: dict[str, CatalogEntry] = {}
    for path in sorted(p for d in directories for p in d.glob("*.json")):
        entry = load_entry(path)
        if entry.id in entries:
            raise CatalogError(f"catalog {path}: id {entry.id!r} is also defined in {entries[entry.id].path}")
        entries[entry.id] = entry
    return entries


def load_catalog(directory: str | os.PathLike[str] | None = None) -> dict[str, CatalogEntry]:
    """Every entry by id: of ``directory`` if given, else of every registered kind's catalog.

    Without ``directory``, the directories listed in ``ONESPEECH_CATALOG_DIR``
    (separated by ``os.pathsep``) are read last and their entries replace shipped
    ones of the same id (an operator's own pins or mirror URLs).
    """
    if directory is not None:
        return _load_dirs([Path(directory)])
    entries = _load_dirs(catalog_dirs())
    extra = [Path(p) for p in os.environ.get(CATALOG_ENV, "").split(os.pathsep) if p]
    entries.update(_load_dirs(extra))
    return entries


def get_entry(model_id: str, directory: str | os.PathLike[str] | None = None) -> CatalogEntry:
    """The entry for ``model_id`` (e.g. ``"Qwen/Qwen3-ASR-0.6B"``).

    Raises
    ------
    UnknownModelError
        Listing the ids the catalog knows.
    """
    entries = load_catalog(directory)
    if model_id not in entries:
        raise UnknownModelError(
            f"model {model_id!r} is not in the catalog; known models: {', '.join(sorted(entries))} "
            "(or pass a local directory holding the publisher files)"
        )
    return entries[model_id]
