"""The packages import each other in one direction only: no cycles, lazy imports included.

Every import statement counts, wherever it stands (module level, inside a function, under
``if TYPE_CHECKING``): a cycle hidden behind a lazy import is still a cycle in the design.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("cached_dist", "store", "procs")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
        for path in (ROOT / package).rglob("*.pyi"):  # a C extension's stub: a module too
            found.setdefault(module_name(path), path)
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, resolved to the most specific module."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                prefix = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            candidates = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        else:
            continue
        for candidate in candidates:
            if candidate in known:
                targets.add(candidate)
                if isinstance(node, ast.ImportFrom):
                    break  # "from pkg import sub": the submodule, not also pkg
            elif candidate == candidates[-1]:
                parent = candidate
                while parent and parent not in known:
                    parent = parent.rpartition(".")[0]
                if parent:
                    targets.add(parent)
    targets.discard(name)
    return targets


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_store_imports_nothing_of_cached_dist() -> None:
    leaks = {m: sorted(t for t in ts if t.startswith("cached_dist"))
             for m, ts in graph().items() if m.startswith("store")}  # fmt: skip
    assert {m: t for m, t in leaks.items() if t} == {}


def test_procs_imports_neither_the_store_nor_cached_dist() -> None:
    """The process machinery is below both: they use it, it knows nothing of keys or blobs."""
    leaks = {m: sorted(t for t in ts if not t.startswith("procs"))
             for m, ts in graph().items() if m.startswith("procs")}  # fmt: skip
    assert {m: t for m, t in leaks.items() if t} == {}


def test_the_checker_finds_a_lazy_cycle(tmp_path: Path) -> None:
    """The detector itself: a cycle through a function-level import is reported."""
    pkg = tmp_path / "cached_dist"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import g\n")
    (pkg / "b.py").write_text("def g():\n    from . import a\n")
    (pkg / "c.py").write_text("import cached_dist.a\n")
    known = {f"cached_dist.{n}": pkg / f"{n}.py" for n in ("a", "b", "c")}
    known["cached_dist"] = pkg / "__init__.py"
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        g = {name: imports_of(name, path, known) for name, path in known.items()}
    finally:
        ROOT = saved
    assert g["cached_dist.c"] == {"cached_dist.a"}
    assert cycles(g) == [["cached_dist.a", "cached_dist.b"]]
