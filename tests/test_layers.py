"""The package's floors (docs/internals.md): imports run down only, no cycle, no import
hidden inside a function. Read from the source text with ``ast``; nothing is imported."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxmma"

#: floor of each sub-package, bottom first; a module may import its own floor and below
FLOORS = (
    "util",
    "spec",
    "bits",
    "arith",
    "models",
    "operands",
    "instructions",
    "gemm",
    "xla_gpu",
    "training",
    "intercept",
    "",  # the public faces: jaxmma/*.py
    "conformance",
)
#: what each floor may hold, in words: the map at the top of docs/internals.md
MAP = pathlib.Path(__file__).resolve().parents[1] / "docs" / "internals.md"


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _floor(module: str) -> int:
    parts = module.split(".")
    sub = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else ""
    if module == "jaxmma.__main__":
        return len(FLOORS)  # the command line sits on top of everything
    return FLOORS.index(sub)


def _imports(path: pathlib.Path, modules: set[str]):
    """(imported module, line, inside a function?) for every jaxmma import of a file."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    nested = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            names = [f"{src}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            src, names = None, [a.name for a in node.names]
        else:
            continue
        for name in names:
            target = name if name in modules else src if src in modules else None
            if target is None and name.split(".")[0] == "jaxmma":
                target = name.rsplit(".", 1)[0] if name.rsplit(".", 1)[0] in modules else name
            if target in modules and target != module:
                out.append((target, node.lineno, id(node) in nested))
    return out


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {_module(p) for p in FILES}
GRAPH = {_module(p): _imports(p, MODULES) for p in FILES}


def test_the_package_is_read():
    assert len(FILES) > 40 and "jaxmma.arith._numerics" in MODULES
    assert any(t == "jaxmma.arith._numerics" for t, _, _ in GRAPH["jaxmma.arith._fixed"])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down(module):
    up = [
        f"{t} (line {line})"
        for t, line, _ in GRAPH[module]
        if t != "jaxmma" and _floor(t) > _floor(module)
    ]
    assert not up, f"{module} (floor {FLOORS[_floor(module)]!r}) imports from above: {up}"


def test_no_import_inside_a_function():
    hidden = [
        f"{m} line {line}: {t}" for m, edges in GRAPH.items() for t, line, inner in edges if inner
    ]
    assert not hidden, "imports of jaxmma inside functions:\n" + "\n".join(hidden)


def test_no_cycle():
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for t, _, _ in GRAPH[m]:
            if t == "jaxmma" or t not in GRAPH:
                continue
            if state.get(t) == 1:
                cycles.append(path[path.index(t) :] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


#: uses of another floor's private names still to be renamed: (module, name)
PRIVATE_PENDING: set = set()


def _private_uses(path: pathlib.Path, modules: set[str]):
    """(private name, line) for every name with a leading underscore that a file takes
    from a module of another floor: ``from ..x._m import _name`` or ``_m._name``."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    aliases, out = {}, []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            src = ".".join(base + ([node.module] if node.module else []))
        else:
            src = node.module or ""
        for a in node.names:
            if f"{src}.{a.name}" in modules:
                aliases[a.asname or a.name] = f"{src}.{a.name}"
            elif src in modules and a.name.startswith("_") and _floor(src) != _floor(module):
                out.append((f"{src}.{a.name}", node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if target and private and _floor(target) != _floor(module):
                out.append((f"{target}.{node.attr}", node.lineno))
    return out


def test_no_private_name_of_another_floor():
    """A floor offers other floors its modules' public names; names with a leading
    underscore stay inside their floor."""
    uses = {(_module(p), name, line) for p in FILES for name, line in _private_uses(p, MODULES)}
    found = sorted(f"{m} line {line}: {n}" for m, n, line in uses if (m, n) not in PRIVATE_PENDING)
    assert not found, "private names reached from another floor:\n" + "\n".join(found)
    stale = PRIVATE_PENDING - {(m, n) for m, n, _ in uses}
    assert not stale, f"PRIVATE_PENDING: no longer used, remove {sorted(stale)}"


#: floors whose ``__init__`` declares what other floors may use: they import those names
#: from the package, never from its modules
INTERFACES = FLOORS[: FLOORS.index("training") + 1]  # util up to training
#: imports of a declared floor's modules still to move to the package's names:
#: (importing module, imported module)
INTERFACE_PENDING: set[tuple[str, str]] = set()


def _reaching(graph, floor: str):
    """(module, imported module, line) for every import of a module of ``floor`` (not its
    package) from another floor."""
    package = f"jaxmma.{floor}"
    return {
        (m, t, line)
        for m, edges in graph.items()
        if _floor(m) != FLOORS.index(floor)
        for t, line, _ in edges
        if t != package and t.startswith(package + ".")
    }


@pytest.mark.parametrize("floor", INTERFACES)
def test_other_floors_use_the_declared_interface(floor):
    init = ROOT.joinpath(floor, "__init__.py").read_text()
    assert "__all__" in init, f"jaxmma/{floor}/__init__.py declares no interface"
    reached = _reaching(GRAPH, floor)
    found = sorted(
        f"{m} line {line}: {t}" for m, t, line in reached if (m, t) not in INTERFACE_PENDING
    )
    assert not found, f"modules of jaxmma.{floor} imported from other floors:\n" + "\n".join(found)
    pending = {(m, t) for m, t in INTERFACE_PENDING if t.startswith(f"jaxmma.{floor}.")}
    stale = pending - {(m, t) for m, t, _ in reached}
    assert not stale, f"INTERFACE_PENDING: no longer needed, remove {sorted(stale)}"


def test_every_pending_import_names_a_declared_floor():
    for m, t in INTERFACE_PENDING:
        assert m in MODULES and t in MODULES, (m, t)
        assert t.split(".")[1] in INTERFACES, f"{t}: its floor declares no interface"


def test_the_checker_sees_a_cycle_and_an_arrow_up(tmp_path):
    pkg = tmp_path / "jaxmma"
    (pkg / "arith").mkdir(parents=True)
    (pkg / "gemm").mkdir()
    for p in (pkg, pkg / "arith", pkg / "gemm"):
        (p / "__init__.py").write_text("")
    (pkg / "arith" / "_a.py").write_text("from ..gemm import _g\n")
    (pkg / "gemm" / "_g.py").write_text("def f():\n    from ..arith import _a\n")
    private = "from ..arith import _a\nfrom ..arith._a import _x\n_a._y\n"
    (pkg / "gemm" / "_h.py").write_text(private)
    files = sorted(pkg.rglob("*.py"))
    global ROOT
    saved = ROOT
    ROOT = pkg
    try:
        mods = {_module(p) for p in files}
        edges = {_module(p): _imports(p, mods) for p in files}
    finally:
        ROOT = saved
    assert edges["jaxmma.arith._a"] == [("jaxmma.gemm._g", 1, False)]
    assert edges["jaxmma.gemm._g"] == [("jaxmma.arith._a", 2, True)]
    assert _floor("jaxmma.gemm._g") > _floor("jaxmma.arith._a")
    saved, ROOT = ROOT, pkg
    try:
        private = _private_uses(pkg / "gemm" / "_h.py", mods)
    finally:
        ROOT = saved
    assert private == [("jaxmma.arith._a._x", 2), ("jaxmma.arith._a._y", 3)]
    # the interface check: a module of arith reached from gemm is found, its package is not
    by_h = {("jaxmma.gemm._h", "jaxmma.arith._a", 1), ("jaxmma.gemm._h", "jaxmma.arith._a", 2)}
    assert _reaching(edges, "arith") == {("jaxmma.gemm._g", "jaxmma.arith._a", 2)} | by_h
    (pkg / "gemm" / "_g.py").write_text("from .. import arith\nfrom ..arith import f\n")
    saved, ROOT = ROOT, pkg
    try:
        edges = {_module(p): _imports(p, mods) for p in files}
    finally:
        ROOT = saved
    assert edges["jaxmma.gemm._g"] == [("jaxmma.arith", 1, False), ("jaxmma.arith", 2, False)]
    assert _reaching(edges, "arith") == by_h


def test_every_floor_is_on_the_map():
    text = MAP.read_text()
    for floor in FLOORS:
        if floor:
            assert f"`{floor}/`" in text, f"docs/internals.md: no row for the floor {floor}/"


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
