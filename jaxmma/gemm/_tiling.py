"""The grid of the GEMM layer's Pallas kernels: which tile of D each program computes."""

from __future__ import annotations

import jax.numpy as jnp


def grouped(p, gi: int, gj: int, group_m: int):
    """Program ``p`` of a batch element -> (row, column) of its tile of D among ``gi x gj``
    tiles: programs run in groups of ``group_m`` tile rows (0: row-major order), so that
    neighbouring programs share tiles of A and B in the cache."""
    if not group_m or gi <= group_m:
        return p // gj, p % gj
    width = group_m * gj
    first = (p // width) * group_m
    rows = jnp.minimum(gi - first, group_m)
    return first + (p % width) % rows, (p % width) // rows


def grid_specs(nb: int, gi: int, gj: int, t):
    """The grid of a kernel over ``nb`` batch elements of ``gi x gj`` tiles of D, and
    ``at(kind)``: the index map of an A-like (``"a"``: the tile's rows, all of K),
    B-like (``"b"``: all of K, the tile's columns) or D-like (``"d"``) block. Programs
    run in groups of ``t.group_m`` tile rows (:func:`grouped`); the tiles sit on the
    grid's first axis (CUDA's x, up to 2**31 - 1 programs; y and z take at most 65,535),
    the batch on the second, unless the batch is the larger."""
    batch_first = nb > gi * gj

    def at(kind):
        def index(*ids):
            z, p = ids if batch_first else ids[::-1]
            i, j = grouped(p, gi, gj, t.group_m)
            return {"a": (z, i, 0), "b": (z, 0, j), "d": (z, i, j)}[kind]

        return index

    return ((nb, gi * gj) if batch_first else (gi * gj, nb)), at
