"""The quick run's samples (tests/_suite.py): one item per group, the same in every
process for a seed, every item in the full sweep."""

import _suite
import pytest
from _suite import CASE_SHARE, halve_slow, params, sample, thin

ITEMS = [(g, i) for g in "abcd" for i in range(5)]


def _group(x):
    return x[0]


def test_one_item_per_group(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    for seed in range(20):
        monkeypatch.setenv("JAXMMA_TEST_SEED", str(seed))
        got = sample(ITEMS, _group)
        assert sorted(g for g, _ in got) == list("abcd")
        assert got == sample(list(ITEMS), _group)  # the same draw in every process
        assert got == [x for x in ITEMS if x in got]  # in the original order


def test_the_seed_rotates_the_sample(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    seen = set()
    for seed in range(50):
        monkeypatch.setenv("JAXMMA_TEST_SEED", str(seed))
        seen.update(sample(ITEMS, _group))
    assert seen == set(ITEMS)


def test_full_sweep_takes_everything(monkeypatch):
    monkeypatch.setenv("JAXMMA_FULL", "1")
    assert sample(ITEMS, _group) == ITEMS
    assert all(m.name == "sampled" for p in params(ITEMS, _group) for m in p.marks)


def test_params_mark_the_rest_full(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    ps = params(ITEMS, _group, ids=lambda x: f"{x[0]}{x[1]}")
    quick = [p for p in ps if [m.name for m in p.marks] == ["sampled"]]
    assert len(quick) == 4 and len(ps) == len(ITEMS)
    assert all([m.name for m in p.marks] == ["full"] for p in ps if p not in quick)
    assert [p.values for p in ps] == ITEMS and ps[0].id == "a0"
    with pytest.raises(KeyError):  # the seed is set by conftest.py for the whole run
        monkeypatch.delenv("JAXMMA_TEST_SEED")
        sample(ITEMS, _group)


NAMES = [f"t.py::f[{i}]" for i in range(20)] + ["t.py::g[0]", "t.py::g[1]", "t.py::h"]


def test_thin_keeps_a_share_of_each_function(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    seen = set()
    for seed in range(400):
        monkeypatch.setenv("JAXMMA_TEST_SEED", str(seed))
        kept = thin(NAMES)
        assert kept == thin(list(NAMES))  # the same draw in every process
        names = [NAMES[i] for i in kept]
        assert sum(n.startswith("t.py::f[") for n in names) == -(-20 // CASE_SHARE)
        assert sum(n.startswith("t.py::g[") for n in names) == 1
        assert "t.py::h" in names
        seen.update(kept)
    assert seen == set(range(len(NAMES)))  # the seed rotates through every case
    monkeypatch.setenv("JAXMMA_FULL", "1")
    assert thin(NAMES) == list(range(len(NAMES)))


SLOW = [f"t.py::s{i}" for i in range(10)] + [
    "tests/test_golden.py::g",
    "t.py::test_matches_the_h100",
]


def test_half_of_the_slow_functions_each_day(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    monkeypatch.setattr(_suite, "slow_functions", lambda: SLOW)
    names = [f"{s}[{c}]" for s in SLOW for c in "ab"] + ["t.py::fast"]
    seen = set()
    for seed in range(40):
        monkeypatch.setenv("JAXMMA_TEST_SEED", str(seed))
        out = halve_slow(names)
        assert out == halve_slow(list(names))  # the same draw in every process
        functions = {n.split("[", 1)[0] for n in out}
        assert len(functions) == 5  # half of the ten that may be left out
        assert all(f"{f}[a]" in out and f"{f}[b]" in out for f in functions)  # whole
        assert not out & {"t.py::fast", "tests/test_golden.py::g[a]"}
        assert not any("test_matches_the_h100" in n for n in out)
        seen |= functions
    assert seen == set(SLOW[:10])  # every slow function runs on some days, not on others
    monkeypatch.setenv("JAXMMA_FULL", "1")
    assert halve_slow(names) == set()


def test_the_slow_list_names_existing_tests():
    """tests/slow.txt names test functions that exist (a renamed test is not silently
    halved forever, nor a missing one kept in the list)."""
    import ast
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    for name in _suite.slow_functions():
        path, func = name.split("::", 1)
        with open(os.path.join(root, path)) as f:
            tree = ast.parse(f.read())
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if func.split("::")[-1] not in defs:
            missing.append(name)
    assert not missing, f"tests/slow.txt names tests that do not exist: {missing}"
