"""The README: every Python block runs; the quick start and the extras `make demo` installs."""

import ast
import contextlib
import io
import pathlib
import re
import sys

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    assert BLOCKS, "the README has Python examples"
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(BLOCKS[index], f"README block {index}", "exec"), {})


def test_quick_start_is_two_commands():
    block = re.search(r"## Quick start\n\n```\n(.*?)```", README.read_text(), flags=re.S)
    assert block, "the README has a Quick start section with a command block"
    commands = [c for c in (line.split("#")[0].strip() for line in block[1].splitlines()) if c]
    assert commands == ["make demo", "make test"], f"expected make demo, make test; got {commands}"


def _names(requirements):
    return {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower().replace("-", "_") for r in requirements}


def test_demo_extra_holds_what_the_demo_imports():
    """`make demo` installs the core dependencies and the demo extra only: every
    third-party module the demo imports is in one of them, and the test extra (what
    `make test` installs) holds the demo extra."""
    tomllib = pytest.importorskip("tomllib")
    root = README.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    demo, test = _names(extras["demo"]), _names(extras["test"])
    assert demo <= test, f"the test extra lacks the demo extra's {sorted(demo - test)}"
    tree = ast.parse((root / "jaxmma" / "__main__.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"jaxmma"}
    assert third_party, "the demo imports numpy and jax at least"
    missing = third_party - _names(project["dependencies"]) - demo
    assert not missing, f"the demo imports {sorted(missing)}, in neither the core deps nor demo"
