"""No import circle in the ``skrull`` package: every import is read from the source (module
level, under ``TYPE_CHECKING`` and inside functions alike, since a lazy import only hides a
circle), resolved to the package's own modules, and the graph must have no strongly connected
component of more than one module. A reader can then open any module and know what it stands
on. ``tests/layers.rs`` checks the Rust crates the same way."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "skrull"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (``skrull._config``, ``skrull.torch``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        # The longest prefix that is a module of the package.
        parts = target.split(".")
        for k in range(len(parts), 0, -1):
            candidate = ".".join(parts[:k])
            if candidate in modules:
                if candidate != name:
                    found.add(candidate)
                return

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                add(sub if sub in modules else origin)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_package() -> None:
    graph = _graph()
    assert {"skrull", "skrull._config", "skrull._errors", "skrull.torch.attention"} <= set(graph)
    assert "skrull._ffi" in graph["skrull._config"]


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_import_circle_in_the_package() -> None:
    """Regression: ``_config <-> _cost <-> _errors`` (``_errors`` imported ``Config`` to word
    messages) and ``_plan <-> _scheduler <-> _layout`` (with ``_refit`` and ``_times`` on the
    loop) were circles."""
    assert _circles(_graph()) == []


def test_errors_stands_on_the_binding_alone() -> None:
    """``_errors`` words messages from what it is given (the library's sentences), so it
    imports nothing of the package but the ctypes binding."""
    assert _graph()["skrull._errors"] <= {"skrull._ffi"}
