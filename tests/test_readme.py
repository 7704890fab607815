"""Every Python block of the README runs."""

import contextlib
import io
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index):
    assert BLOCKS, "the README has Python examples"
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(BLOCKS[index], f"README block {index}", "exec"), {})
