"""Split-K: K cut into slices, each chained from +0, the f32 partials reduced.

Three rules, as library kernels cut K (docs/gemm.md, "Split-K"; measured on an H100):

* ``"cublas"`` (cuBLAS ``nvjet`` ``*_splitK_*`` kernels): K is cut at multiples of the K
  tile T into ``ceil(K / T)`` tiles; each slice takes ``ceil(tiles / S)`` whole tiles, the
  last one the rest.
* ``"cutlass"`` (CUTLASS ``s1688gemm`` split-K): slices of ``roundup4(ceil(K / S))``
  elements, the last one the rest; where a slice is not a multiple of T, its first tile
  holds the leftover elements followed by +0 elements, then whole tiles follow.
* ``"xla"`` (XLA:GPU's split-K Triton fusions): S contiguous slices of K / S.

Each slice is a chain of the instruction from +0 (its own promotion groups with
``promote_every``), which the executor runs between the cut (:func:`batches`) and the
reduction (:func:`reduce`); the partials are added with IEEE f32 adds (FADD) in the
order the reduce kernel uses: ``"sequential"`` ``((p0 + p1) + p2) + ...``, ``"halving"``
``p_i + p_(i + S/2)`` until one is left, or a nested pairing tree of slice indices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def slices(rule: str, K: int, S: int, T: int) -> list[tuple[int, int, int]]:
    """``(start, stop, lead)`` of each slice: elements ``[start, stop)`` of K; ``lead``
    elements come first in a tile of T, then ``T - lead`` +0 elements (``lead == T``:
    none). Raises ValueError when a slice would be empty (before any list is built: a
    huge ``S`` costs nothing)."""
    if S > K:
        raise ValueError(
            f"split_k: {S} slices of K = {K} leave a slice empty under every rule; at most K"
        )
    if rule == "cublas":
        tiles = _cdiv(K, T)
        per = _cdiv(tiles, S)
        bounds = [(i * per * T, min((i + 1) * per * T, K)) for i in range(S)]
    elif rule == "cutlass":
        L = _cdiv(_cdiv(K, S), 4) * 4
        bounds = [(i * L, min((i + 1) * L, K)) for i in range(S)]
    else:
        if K % S:
            raise ValueError(f"split_k: the 'xla' rule cuts K = {K} into {S} equal slices")
        bounds = [(i * K // S, (i + 1) * K // S) for i in range(S)]
    out = []
    for i, (a, b) in enumerate(bounds):
        if b <= a:
            raise ValueError(
                f"split_k: {S} slices under the {rule!r} rule leave slice {i} of K = {K} "
                f"empty (k_tile = {T})"
            )
        n = b - a
        lead = n - (_cdiv(n, T) - 1) * T if rule == "cutlass" else T
        out.append((a, b, lead))
    return out


def _batched(A, B, start: int, count: int, n: int, lead: int, T: int):
    """``count`` slices of n elements from ``start``: A ``[count, ..., M, n']``, B
    ``[count, ..., n', N]`` (n' = n with the +0 elements after the first ``lead``)."""
    a = A[..., start : start + count * n]
    b = B[..., start : start + count * n, :]
    a = jnp.moveaxis(a.reshape(a.shape[:-1] + (count, n)), -2, 0)
    b = jnp.moveaxis(b.reshape(b.shape[:-2] + (count, n, b.shape[-1])), -3, 0)
    if lead < T and lead < n:
        za = jnp.zeros(a.shape[:-1] + (T - lead,), a.dtype)
        zb = jnp.zeros(b.shape[:-2] + (T - lead, b.shape[-1]), b.dtype)
        a = jnp.concatenate([a[..., :lead], za, a[..., lead:]], axis=-1)
        b = jnp.concatenate([b[..., :lead, :], zb, b[..., lead:, :]], axis=-2)
    return a, b


def lead_first(A, B, T: int):
    """A ``[..., M, K]`` and B ``[..., K, N]`` with K laid out as CUTLASS runs one slice
    in k tiles of T: the partial tile's elements first, +0s to a whole tile, then the
    rest (unchanged where T divides K)."""
    ((_, K, lead),) = slices("cutlass", A.shape[-1], 1, T)
    a, b = _batched(A, B, 0, 1, K, lead, T)
    return a[0], b[0]


def batches(A, B, C0, zero, plan, T: int) -> list:
    """The slices of ``plan`` (:func:`slices`) as chains to run: ``(a [count, ..., M,
    n'], b [count, ..., n', N], c [count, ..., M, N])`` for each run of slices of the same
    shape, which runs as one batched chain; slice 0 starts from ``C0``, the others from
    ``zero``. The D of each batch holds the f32 partials of its slices, in order."""
    out = []
    i = 0
    while i < len(plan):
        a0, b0, lead = plan[i]
        n = b0 - a0
        j = i + 1
        while j < len(plan) and plan[j][1] - plan[j][0] == n and plan[j][2] == lead:
            j += 1
        a, b = _batched(A, B, a0, j - i, n, lead, T)
        starts = [C0 if s == 0 else zero for s in range(i, j)]
        lead_shape = jnp.broadcast_shapes(*(x.shape for x in starts))
        c = jnp.stack([jnp.broadcast_to(x, lead_shape) for x in starts])
        out.append((a, b, c))
        i = j
    return out


def _heights(order, S: int):
    """The nodes of pairing tree ``order`` by height: ``[[(left, right), ...], ...]``,
    children named by their index in the list of leaves then nodes of lower heights."""
    levels, index = [], {}

    def height(t):
        if isinstance(t, int):
            return 0
        h = 1 + max(height(t[0]), height(t[1]))
        while len(levels) < h:
            levels.append([])
        levels[h - 1].append(t)
        return h

    height(order)
    for s in range(S):
        index[s] = s
    n = S
    out = []
    for nodes in levels:
        out.append([(index[a], index[b]) for a, b in nodes])
        for t in nodes:
            index[t] = n
            n += 1
    return out


def reduce(parts: list, order):
    """The partials (f32 bits) added with FADD in ``order`` (see the module docstring).

    Adds of one tree level run as one vectorized FADD (the same bits as one at a time),
    the sequential order as a ``lax.scan``, so the program grows with the tree's height
    only."""
    add = lambda x, y: arith.ieee_add(x, y, "f32")  # noqa: E731
    if len(parts) == 1:
        return parts[0]
    P = jnp.stack(parts)
    if order == "sequential":
        return jax.lax.scan(lambda acc, p: (add(acc, p), None), P[0], P[1:])[0]
    if order == "halving":
        while P.shape[0] > 1:
            h = P.shape[0] // 2
            P = add(P[:h], P[h:])
        return P[0]
    vals = P
    for level in _heights(order, len(parts)):
        a = np.array([x for x, _ in level])
        b = np.array([y for _, y in level])
        vals = jnp.concatenate([vals, add(vals[a], vals[b])])
    return vals[-1]
