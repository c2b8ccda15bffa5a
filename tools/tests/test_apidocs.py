"""docs/api/ matches the code, and every public name is documented (onespeech_tools.apidocs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from onespeech_tools import apidocs

DOCS_API = Path(__file__).resolve().parents[2] / "docs" / "api"
REGENERATE = "python -m onespeech_tools.apidocs --out docs/api"


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    # the reference covers onespeech.speech.server, whose modules import the [server] extra
    for module in ("starlette", "uvicorn"):
        pytest.importorskip(module, reason="needs onespeech-speech[server] (tox.ini py env)")
    return apidocs.render_pages()


def test_docs_api_is_in_sync_with_the_code(pages: dict[str, str], tmp_path: Path) -> None:
    apidocs.write_pages(tmp_path)
    stale = []
    for name in sorted({p.name for p in tmp_path.glob("*.md")} | {p.name for p in DOCS_API.glob("*.md")}):
        fresh, committed = tmp_path / name, DOCS_API / name
        if not committed.exists():
            stale.append(f"{name} is missing")
        elif not fresh.exists():
            stale.append(f"{name} documents no package any more")
        elif fresh.read_bytes() != committed.read_bytes():
            stale.append(f"{name} differs")
    assert not stale, (
        "docs/api is out of date with the code (" + "; ".join(stale) + "). "
        f"Regenerate it from the repository root with `{REGENERATE}` and commit the result."
    )


def test_every_public_name_is_documented(pages: dict[str, str]) -> None:
    missing = apidocs.undocumented()
    assert not missing, (
        f"{len(missing)} public names have no documentation (a class or function needs a docstring; "
        "a constant or type alias a `#:` comment above its assignment):\n  " + "\n  ".join(missing)
    )


def test_pages_are_the_same_when_rendered_twice(pages: dict[str, str]) -> None:
    assert apidocs.render_pages() == pages


def test_every_name_of_every_all_is_on_its_page(pages: dict[str, str]) -> None:
    for package, sections in apidocs.collect().items():
        text = pages[f"{package}.md"]
        for module, entries in sections:
            assert f"## `{module.__name__}`" in text
            for entry in entries:
                assert f"### `{entry.name}`" in text or f"- `{entry.name}`: " in text, entry.path


def test_index_links_every_page_and_docs_index_links_it(pages: dict[str, str]) -> None:
    for package in apidocs.PACKAGES:
        assert f"]({package}.md)" in pages["index.md"]
    assert "(api/index.md)" in (DOCS_API.parent / "index.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("comment", "doc"),
    [
        ("#: One line above.\nLIMIT = 3\n", "One line above."),
        ("#: First line,\n#: second line.\nLIMIT = 3\n", "First line,\nsecond line."),
        ("LIMIT = 3  #: After the value.\n", "After the value."),
        ("# an ordinary comment\nLIMIT = 3\n", None),
        ("LIMIT = 3  # an ordinary comment\n", None),
        ("#: Both names.\nA, LIMIT = 1, 3\n", "Both names."),
        ("#: Annotated.\nLIMIT: int = 3\n", "Annotated."),
        ('TEXT = "#: not a comment"\nLIMIT = 3\n', None),
    ],
)
def test_the_comment_rule_for_constants(comment: str, doc: str | None, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "apidocs_probe.py").write_text(comment, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "apidocs_probe", raising=False)
    monkeypatch.delitem(apidocs._SOURCES, "apidocs_probe", raising=False)
    assert apidocs.own_doc(3, ("apidocs_probe", "LIMIT")) == doc


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Path("relative/file"), "Path('relative/file')"),
        (Path("/somewhere/else"), "Path(<absolute path>)"),
        (frozenset({"b", "a"}), "frozenset({'a', 'b'})"),
        (object(), "<object object>"),
        (tuple(range(100)), "<tuple of 100 items>"),
    ],
)
def test_values_are_shown_without_machine_details(value: object, shown: str) -> None:
    assert apidocs.show_value(value) == shown


def test_a_path_inside_a_package_is_shown_relative_to_it() -> None:
    import onespeech.features

    directory = Path(onespeech.features.__path__[0])
    assert apidocs.show_value(directory / "catalog") == "Path('<onespeech.features>/catalog')"


def test_pages_do_not_depend_on_what_ran_before(pages: dict[str, str]) -> None:
    # building the CLI fills module-level registries (cli.COMMANDS); the reference must not show them
    from onespeech.speech.cli import build_parser

    build_parser()
    assert apidocs.render_pages() == pages
