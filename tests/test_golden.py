"""Every register captured on an sm_90 GPU (tests/golden/sm_90) against the emulator.

The inputs are regenerated from each record's seed (their CRC32 is checked); the
hardware outputs are compared bit for bit, NaN payloads and signed zeros included. The quick
run checks one record of every opcode of each file (another shape from day to day), drawn
with the run's seed; the full sweep (``--full``) checks every record.
"""

import glob
import os

import pytest
from _suite import sample

import jaxmma
from jaxmma import conformance

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "sm_90")
# gemm-*.npz hold chained GEMMs (tests/test_gemm_golden.py), wgmma-*.npz whole wgmma
# operands in another layout (tests/test_wgmma.py)
FILES = sorted(
    p
    for p in glob.glob(os.path.join(GOLDEN, "*.npz"))
    if not os.path.basename(p).startswith(("gemm-", "wgmma-"))
)


def test_golden_files_cover_every_form_sm90_runs():
    captured = {r.text for path in FILES for r in conformance.load_golden(path)}
    runnable = {i.text for i in jaxmma.all_instructions(arch="sm_90")}
    assert runnable == captured
    assert len(captured) == 455


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_emulator_matches_hardware(path):
    failures = []
    records = sample(
        conformance.load_golden(path),
        key=lambda r: r.instruction().opcode,
        salt=os.path.basename(path),
    )
    assert records
    for rec in records:
        ins = rec.instruction()
        assert ins.arch == "sm_90"
        vec = conformance.regenerate_inputs(rec)  # raises if the generator drifted
        res = conformance.compare(ins, vec, rec.outputs)
        assert res.total > 0
        if res.status != "ok" or res.equal != res.total:
            failures.append(f"{rec.text}: {res.status} {res.equal}/{res.total} {res.message}")
    assert not failures, "\n".join(failures)


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
