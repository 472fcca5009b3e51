"""No import cycles: between cpubuild's subpackages (and top-level modules), and
between cpukern's modules. Read from the source with ast (nothing imported);
imports under `if TYPE_CHECKING:` do not count (they never run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def module_imports(root: Path, package: str) -> dict[str, set[str]]:
    """Dotted module -> the modules it imports (relative imports resolved; `from x import y`
    is x.y when that is a module, else x)."""
    graph: dict[str, set[str]] = {}
    paths = sorted((root / package).rglob("*.py"))
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__") for p in paths}
    for path in paths:
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_init else parts)
        here = parts[:-1]  # the package the module is in
        names: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
                continue
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                names.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        graph[module] = {n for n in names if n == package or n.startswith(package + ".")}
    return graph


def unit_graph(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph between units: dotted names cut to `depth` parts (2: cpubuild.<subpackage or module>)."""
    def unit(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    units: dict[str, set[str]] = {}
    known = {unit(m) for m in graph}
    for module, names in graph.items():
        edges = units.setdefault(unit(module), set())
        edges.update(unit(n) for n in names if unit(n) in known and unit(n) != unit(module))
    return units


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# cpukern's torch operators (_torch.py) take the op modules' implementations as
# arguments and _packed.py holds what both sides read, so ops/gemm -> _torch only.
# Between modules too (depth 99: every module its own unit): index/__init__ picks
# the storage backend, so index.storage and index.s3 do not import each other.
@pytest.mark.parametrize("depth", [2, 99], ids=["packages", "modules"])
@pytest.mark.parametrize(("root", "package"), [(REPO / "tools", "cpubuild"), (REPO / "python", "cpukern")])
def test_no_import_cycles(root: Path, package: str, depth: int) -> None:
    found = cycles(unit_graph(module_imports(root, package), depth))
    assert found == [], f"import cycles between {package}'s parts: {found}"


def test_the_module_check_sees_a_cycle_inside_a_package(tmp_path: Path) -> None:
    """index.storage -> index.s3 (a function-level import) -> index.storage, as it was: found."""
    pkg = tmp_path / "pkg" / "index"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "storage.py").write_text("def open_storage():\n    from .s3 import S3\n    return S3\n")
    (pkg / "s3.py").write_text("from .storage import open_storage\nS3 = open_storage\n")
    graph = module_imports(tmp_path, "pkg")
    assert cycles(unit_graph(graph, 2)) == []  # one unit at package depth
    assert cycles(unit_graph(graph, 99)) == [["pkg.index.s3", "pkg.index.storage"]]
