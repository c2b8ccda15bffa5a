"""No import cycles inside speech: the commands do not import ``cli`` (which imports them), and no
module imports, even lazily, a module that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import onespeech.speech

ROOT = Path(onespeech.speech.__file__).parent
PACKAGE = "onespeech.speech"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (anywhere in it: lazy imports count too)."""
    modules = {_module(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # imports for type checkers only never run: they cannot close a cycle
        typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for stmt in block.body for node in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        # the package's __init__ only re-exports the API; an edge to it says nothing about a cycle
        graph[name] = {t for t in targets if t in modules and t not in (name, PACKAGE)}
    return graph


def test_the_commands_do_not_import_cli() -> None:
    graph = _graph()
    commands = [name for name in graph if name.startswith(f"{PACKAGE}.commands.")]
    assert commands and all(f"{PACKAGE}.cli" not in graph[name] for name in commands)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in sorted(graph[name]):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = [stack.pop()]
            while component[-1] != name:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_module_of_speech_is_part_of_an_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
