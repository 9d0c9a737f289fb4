"""The package's import graph has no cycle, lazy imports (inside functions) included.

A cycle hidden by a lazy import still ties two modules together: neither can be read, moved or tested without
the other. The graph is built from every ``import``/``from`` statement of ``mlm_suite``'s modules (those under
``if TYPE_CHECKING:`` excepted: they never run), one edge per imported ``mlm_suite`` module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import mlm_suite

PACKAGE = Path(mlm_suite.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(name: str, path: Path) -> set[str]:
    """The ``mlm_suite`` modules that the statements of ``name`` import (``from a import b``: ``a.b`` if a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {module for module in found if module in MODULES and module != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once every edge out of it is explored
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := walk(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    module = tmp_path / "cards.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlm_suite.training.trainer import JobTrainer\n"
        "def write():\n    from mlm_suite.training import trainer\n    from mlm_suite.cards import render_card\n"
    )
    assert imported_modules("mlm_suite.cards.x", module) == {"mlm_suite.training.trainer", "mlm_suite.cards"}


def test_every_module_imports_and_the_import_graph_has_no_cycle():
    for name in MODULES:
        importlib.import_module(name)
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert "mlm_suite.cards" in graph["mlm_suite.training.job_outputs"]  # the graph sees the package's imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
