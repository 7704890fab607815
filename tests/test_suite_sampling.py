"""The quick run's samples (tests/_suite.py): one item per group, the same in every
process for a seed, every item in the full sweep."""

import pytest
from _suite import params, sample

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
    assert all(not p.marks for p in params(ITEMS, _group))


def test_params_mark_the_rest_full(monkeypatch):
    monkeypatch.delenv("JAXMMA_FULL", raising=False)
    ps = params(ITEMS, _group, ids=lambda x: f"{x[0]}{x[1]}")
    quick = [p for p in ps if not p.marks]
    assert len(quick) == 4 and len(ps) == len(ITEMS)
    assert all(m.name == "full" for p in ps for m in p.marks)
    assert [p.values for p in ps] == ITEMS and ps[0].id == "a0"
    with pytest.raises(KeyError):  # the seed is set by conftest.py for the whole run
        monkeypatch.delenv("JAXMMA_TEST_SEED")
        sample(ITEMS, _group)
