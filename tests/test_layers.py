"""The package's layers, and a check that the imports keep to them.

Every import in ``src/chainrule`` is read from the source (at the top of a
module, inside a function or under ``if TYPE_CHECKING``) and must go to the
same layer or a lower one; and no module may reach itself through imports
that run (a circle), type-only imports aside. The layers are the data
below, lowest first; ``docs/architecture.md`` and the design notes draw them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: Lowest first. A module belongs to the layer of its longest listed prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("files", ("chainrule._version", "chainrule._launch", "chainrule.io")),
    ("value", ("chainrule.value",)),
    (
        "shared",
        (
            "chainrule.module",
            "chainrule.random_state",
            "chainrule.threads",
            "chainrule.transformer",
        ),
    ),
    ("tensor", ("chainrule.tensor",)),
    (
        "training",
        (
            "chainrule.engine",
            "chainrule.functional",
            "chainrule.losses",
            "chainrule.fused",
            "chainrule.nn",
            "chainrule.optim",
            "chainrule.check",
            "chainrule.checkpoint",
            "chainrule.data",
        ),
    ),
    ("compiler", ("chainrule.compiler",)),
    ("explainer", ("chainrule.explainer",)),
    ("interop", ("chainrule.interop",)),
    ("bench", ("chainrule.bench",)),
    ("cli", ("chainrule.cli", "chainrule.__main__")),
    ("package", ("chainrule",)),  # the public names, gathered from all of the above
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer."""
    best, index = "", -1
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, k
    if index < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return index


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: its name, its file and whether it is a package."""
    found = {}
    for path in sorted((src / "chainrule").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = (path, is_package)
    return found


def _type_only(tree: ast.AST) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        lines.add(sub.lineno)
    return lines


def imports(
    name: str, path: Path, is_package: bool, known: set[str]
) -> list[tuple[str, int, bool]]:
    """``(imported module, line, type only)`` for every import of chainrule in one file."""
    tree = ast.parse(path.read_text(), str(path))
    type_only = _type_only(tree)
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule sub
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            targets = subs if len(subs) == len(node.names) else [module, *subs]
        for target in targets:
            if target == "chainrule" or target.startswith("chainrule."):
                while target not in known:  # an attribute path: the module that holds it
                    target = target.rpartition(".")[0]
                found.append((target, node.lineno, node.lineno in type_only))
    return found


def import_graph(src: Path = SRC) -> dict[str, list[tuple[str, int, bool]]]:
    mods = modules(src)
    known = set(mods)
    return {name: imports(name, path, pkg, known) for name, (path, pkg) in mods.items()}


def upward_imports(graph: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    """Imports from a lower layer to a higher one (type-only ones included)."""
    bad = []
    for name, targets in graph.items():
        for target, line, _ in targets:
            if layer_of(target) > layer_of(name):
                bad.append(
                    f"{name}:{line} imports {target} "
                    f"({LAYERS[layer_of(name)][0]} -> {LAYERS[layer_of(target)][0]})"
                )
    return bad


def circles(graph: dict[str, list[tuple[str, int, bool]]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one
    module, or a module importing itself), type-only imports left out."""
    edges = {
        name: sorted({t for t, _, type_only in targets if not type_only})
        for name, targets in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):  # Tarjan's algorithm, with an explicit stack
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, []))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1 or v in edges.get(v, []):
                        found.append(sorted(component))
    return found


def test_no_import_goes_up_a_layer() -> None:
    assert upward_imports(import_graph()) == []


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_the_check_fails_on_a_planted_upward_import(tmp_path: Path) -> None:
    # A copy of the package with one import inside a function of the
    # engine, up to the drawings: both checks see it.
    copy = tmp_path / "src"
    for path, _ in modules().values():
        target = copy / path.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    engine = copy / "chainrule" / "value" / "engine.py"
    engine.write_text(
        engine.read_text() + "\n\ndef _draw(v):\n    from ..explainer.draw import to_dot\n\n"
        "    return to_dot(v)\n"
    )
    graph = import_graph(copy)
    assert [b.split(" (")[0] for b in upward_imports(graph)] == [
        f"chainrule.value.engine:{len(engine.read_text().splitlines()) - 2} "
        "imports chainrule.explainer.draw"
    ]
    assert any(
        "chainrule.value.engine" in c and "chainrule.explainer.draw" in c for c in circles(graph)
    )


def test_every_module_is_in_a_layer_and_the_top_level_is_small() -> None:
    mods = modules()
    for name in mods:
        layer_of(name)
    top = [n for n, (_, pkg) in mods.items() if n.count(".") == 1 and not pkg]
    assert len(top) <= 15, sorted(top)


@pytest.mark.parametrize(
    "package", ["value", "tensor", "compiler", "explainer", "io", "cli", "bench", "interop", "data"]
)
def test_each_layer_says_what_it_is_and_what_it_may_import(package: str) -> None:
    init = SRC / "chainrule" / package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc, f"chainrule.{package} has no docstring"
    assert "import" in doc, f"chainrule.{package}'s docstring does not say what it may import"


def test_the_architecture_page_draws_the_same_layers() -> None:
    page = (SRC.parent / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| ")]
    assert rows[1:] == [name for name, _ in LAYERS]  # after the header row


def test_the_scalar_core_keeps_its_budget() -> None:
    # The node, the table and the walk: what a reader of micrograd opens first.
    core = ["engine.py", "primitives.py", "walk.py"]
    lines = sum(len((SRC / "chainrule" / "value" / f).read_text().splitlines()) for f in core)
    assert lines <= 500
