"""The quick run and the full sweep (see conftest.py): which mode, which seed, samples."""

import os
import random


def full_sweep() -> bool:
    """Whether this run is the full sweep (``pytest --full`` or ``JAXMMA_FULL=1``)."""
    return os.environ.get("JAXMMA_FULL", "") not in ("", "0")


def seed() -> int:
    """The seed of this run's samples (``JAXMMA_TEST_SEED``, set by conftest.py)."""
    return int(os.environ["JAXMMA_TEST_SEED"])


def sample(items, key, *, salt=""):
    """One item per ``key(item)`` group, drawn with this run's seed; every item in the full
    sweep. The draw depends only on the seed, ``salt`` and the groups, so every xdist
    worker picks the same items."""
    items = list(items)
    if full_sweep():
        return items
    groups = {}
    for i, it in enumerate(items):
        groups.setdefault(repr(key(it)), []).append(i)
    rng = random.Random(f"{seed()}:{salt}")
    picked = {rng.choice(g) for _, g in sorted(groups.items())}
    return [it for i, it in enumerate(items) if i in picked]


def params(items, key, *, salt="", ids=None):
    """``items`` as pytest parameters, those outside this run's :func:`sample` marked
    ``full`` (run only in the full sweep): the quick run checks one item per ``key``
    group, a different one from day to day. Tuple items fill several argument names."""
    import pytest

    items = list(items)
    keep = {id(x) for x in sample(items, key, salt=salt)}
    out = []
    for x in items:
        marks = (pytest.mark.sampled,) if id(x) in keep else (pytest.mark.full,)
        kw = {"id": ids(x)} if ids is not None else {}
        values = x if isinstance(x, tuple) else (x,)
        out.append(pytest.param(*values, marks=marks, **kw))
    return out


#: the quick run keeps one in this many cases of a parametrized test (at least one)
CASE_SHARE = 16


def thin(names):
    """The indices of ``names`` (test ids, ``function[case]``) that the quick run keeps:
    of each parametrized function's cases a ``1 / CASE_SHARE`` share (at least one),
    drawn with this run's seed, the same in every process; every index in the full
    sweep. Functions with one case are kept whole."""
    names = list(names)
    if full_sweep():
        return list(range(len(names)))
    groups = {}
    for i, name in enumerate(names):
        groups.setdefault(name.split("[", 1)[0], []).append(i)
    keep = set()
    for base, idx in sorted(groups.items()):
        rng = random.Random(f"{seed()}:{base}")
        keep.update(rng.sample(idx, -(-len(idx) // CASE_SHARE)))
    return sorted(keep)
