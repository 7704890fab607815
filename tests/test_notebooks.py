"""Every notebook under notebooks/ runs without an error, at its small size (the quick
run: two, drawn with the run's seed; the full sweep: all of them).

The notebooks read ``JAXMMA_NOTEBOOK_SMALL=1`` and shrink their experiments (fewer
configurations, smaller matrices, fewer training steps); the outputs committed with them
come from the full-size run.
"""

import os
import pathlib

import nbclient
import nbformat
import pytest
from _suite import params

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
STUDIES = {
    "fp8_accumulation",
    "block_scaled_training",
    "sparsity",
    "rounding_probes",
    "layouts",
    "transformer_recipes",
}


@pytest.mark.filterwarnings("ignore")  # the kernel machinery's own deprecation notices
@pytest.mark.parametrize(
    "path",
    # the quick run: one notebook (of up to ten), another each day
    params(
        NOTEBOOKS, key=lambda p: NOTEBOOKS.index(p) // 10, salt="notebooks", ids=lambda p: p.stem
    ),
)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("JAXMMA_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError naming the cell and the exception


def test_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= STUDIES
