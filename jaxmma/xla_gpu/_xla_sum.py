"""The order in which XLA:GPU's MLIR reduction emitters add an f32 ``reduce_sum``.

Read from openxla/xla (late 2025: ``xla/backends/gpu/codegen/emitters/reduction.cc``,
``xla/service/gpu/reduction_utils.cc``, the shuffle lowering in
``xla/codegen/emitters/transforms/lower_xla_to_scf.cc``) and checked on an H100 against
XLA:GPU's sums of random data (``tests/golden/xla/xla-sums.npz``). ``x`` is viewed as
``[R, n]``: a *row* reduction adds over the minor ``n`` (the reduced axes are a suffix),
a *column* reduction over the major ``R`` (a prefix), a full reduction is a row of
``R = 1``. Every accumulator starts at +0 and adds one element at a time:

- **Row** (``RowReductionFusion``): ``T = min(1024, roundup(ceil(n / 16), 32))`` threads
  per row; loads of ``v`` elements (``v = 1`` if ``n`` is odd or ``2T > n``; else 2, or
  for a fusion whose smallest input is narrower than 32 bits 4 where ``4T <= n`` and
  ``n % 4 == 0``); ``m = min(16 / v, ceil(n / v / T))`` loads per thread. Thread ``t``
  adds ``x[j v], ..., x[j v + v - 1]`` for ``j = t, t + T, ..., t + (m - 1) T`` (``j <
  n / v``) into one accumulator; each warp's 32 accumulators are reduced by shuffles down
  (``a[i] += a[i + d]`` for ``d = 16, 8, 4, 2, 1``), and the ``T / 32`` warp results (the
  rest +0) by the same tree.
- **Column** (``ColumnReductionFusion``): for each column, warp ``w`` of 32 adds rows
  ``w, w + 32, w + 64, ...`` in turn; the 32 partials (+0 past ``R``) by the tree.
- **Elemental loop** (rows of ``n < 32`` with ``32 % n != 0``): one thread adds the
  elements in index order. (XLA also loops over small columns, ``R < 32`` and the like;
  no capture holds one, so they are refused.)

- **Split** (a full sum of ``N > 16384``): XLA's tree rewriter pads ``N`` with zeros to
  ``[k1, k2]`` (:func:`split_params`), sums each row of ``k2`` (a row reduction, above)
  in one kernel and the ``k1`` results in a second (:func:`split_plan`).

- **Triton normalization fusion** (``__triton``: XLA's softmax and layer-norm fusions)
  whose tile holds whole rows of ``n``, no TMA (:func:`triton_plan`); the row padded
  with +0 to the power of two ``P >= n``. *One row a program* (1, 2 or 4 warps ``W``):
  lane ``l`` of warp ``w`` holds the elements ``l + 32 w + 32 W r`` for ``r = 0 ... P /
  32 W - 1`` (one element a lane and repetition) and adds them as a pairwise tree in
  that order (``(e0 + e1) + (e2 + e3)``, ...), then the lanes by the shuffle tree and
  the warps' results by the same tree. *Several rows a program* (2 or 4 warps): ``v``
  contiguous elements a lane (Triton's vectorized layout: 4, 2 or 1, the largest that
  divides ``n``), ``L = min(32, P / v)`` lanes and then ``min(W, P / v L)`` warps along
  the row, the others on other rows; a lane adds its elements ``v (l + L w + L W' r) +
  s`` pairwise in the order of ``(r, s)``, then the ``L`` lanes and the warps as above
  (read for ``v = 4`` only: rows whose length is a multiple of 4; the others were seen
  with ``v`` 2 and 1 in held-out captures but are not kept). Of 16-bit inputs (bf16
  widened in the fusion, every input of it 16-bit): one-row tiles as above (1 and 2
  warps); tiles of several rows with ``v = 8`` (16 bytes a lane), read for rows a
  multiple of 8 with all 32 lanes along the row (``xla-narrow-rows-*.npz``: FPRev probes
  and log-softmaxes, rows of 100 to 1000). Measured on an H100 (three processes,
  ``xla-triton-norm.npz``, ``xla-triton-rows.npz``): softmaxes, layer norms and ``x /
  sum(x)`` of rows of 33 to 4096 in one-row tiles and of 64 to 1000 in tiles of 2 to 8
  rows (batched as attention's are), every kept row; a sequential sum in each lane gives
  other bits on a quarter of the rows. Tiles of part of a row (other orders, measured to
  differ), 8 warps, rows of 32 or fewer or longer than 4096 (1024 in tiles of several
  rows), one-warp tiles of several rows and fewer than 64 elements a warp are refused.
- **Triton reduce fusion of a whole vector** (a loss's mean: output tile ``[]``, one
  program of ``W`` = 1, 2 or 4 warps, TMA or not): the layout of the several-rows tiles
  with ``v = min(4, P / 32 W)`` contiguous elements a lane and all 32 lanes and ``W``
  warps along the vector: lane ``l`` of warp ``w`` adds ``v (l + 32 w + 32 W r) + s``
  pairwise in the order of ``(r, s)``, then the lanes by the shuffle tree, then the warps
  (half apart first). Read from FPRev probes (``xla-scalar-sums-*.npz``: every pair of
  an anchor at 0, 1, 5 or the last element and any other element, vectors of 33 to
  4096, 1, 2 and 4 warps, with and without TMA; an H100 and an H200) and checked on 256
  random vectors of each; vectors of 32 or fewer, longer than 4096, or of narrow inputs,
  and 2 elements a lane with 2 or 4 warps (not seen) are refused.
- **Triton reduce fusion of rows** (the fusion's output is the row sums, its tile spans
  only the kept dimensions: ``[1]`` or ``[2]`` rows a program), one warp, no TMA, a row of
  ``64 < n < 128``, a ``[R, n]`` input (other tiles and ranks refused): padded with +0
  to 128, lane ``l`` holds the *contiguous* elements ``4 l ... 4 l + 3`` and adds them
  pairwise, then the shuffle tree. Measured on an H100:
  ``xla-sums.npz`` rows of 72 (tile ``[2]``; bf16 widened, tile ``[1]``), every row; the
  strided order of the normalization fusions gives 34 of 94 rows of 80.

Refused (:func:`plan` returns the reason): the multi-row emitter (``n`` a power of two up
to ``32 v``) and the small-column one (``32 % n == 0``), whose orders were not derived;
rows longer than 16384 in a batch of rows and columns longer than 4096, which XLA also
splits; anything but f32. The sign of a sum of only -0 elements is not
established (the emitters' adds carry LLVM's ``nsz`` flag).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from . import _replay_ieee

F32 = jnp.float32
LANES = 32


@dataclasses.dataclass(frozen=True)
class SumPlan:
    """How one ``reduce_sum`` is added (module docstring), over ``x`` viewed as
    ``[R, n]``; ``v`` the load width (rows), or the warps (Triton rows)."""

    kind: str  # "row", "loop_row", "column", "triton_row", "triton_rows" or "split"
    R: int
    n: int
    v: int = 1
    #: ``"split"`` (a full sum XLA's tree rewriter cut in two kernels): the zeros padded
    #: at the end, the row reduction of the ``[k1, k2]`` view and the sum of its results
    pad: int = 0
    #: Triton rows: lanes along the row and contiguous elements a lane
    lanes: int = 32
    spt: int = 1
    inner: SumPlan | None = None
    outer: SumPlan | None = None


def _add(a, b):
    """f32 ``a + b`` (FADD) on the bits: subnormals kept, which the CPU's own add flushes."""
    return _replay_ieee.fadd(a, b)


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def row_threads(n: int) -> int:
    """Threads per row: ``min(1024, roundup(ceil(n / 16), 32))``."""
    return min(1024, math.ceil(math.ceil(n / 16) / LANES) * LANES)


def split_params(N: int) -> tuple:
    """``(k1, k2, pad)``: how XLA's tree rewriter cuts a row of ``N > 16384`` elements
    (``TreeReductionRewriter::ComputeSplitParams`` and the row swap rule): ``N + pad``
    elements viewed as ``[k1, k2]``, each row of ``k2`` summed, then the ``k1`` sums."""
    k2 = min(math.isqrt(N), 16384)
    pad = (k2 - N % k2) % k2
    k1 = (N + pad) // k2
    for i in range(k2 - 1, k2 // 2, -1):
        p = (i - N % i) % i
        if p < pad or (p == pad and _pow2(i)):
            pad, k1 = p, (N + p) // i
    k2 = (N + pad) // k1
    swap = False
    if k1 <= 16384:
        if k2 % 2 == 0 and N % 2 == 0:
            swap = 2 * k2 < k1 or k1 % 2 == 0
        else:
            swap = N % 2 == 0 or k1 % 2 != 0
    if swap:
        k1, k2 = k2, k1
    return k1, k2, pad


def split_plan(N: int, narrow: bool) -> SumPlan | str:
    """The :class:`SumPlan` of a full sum of ``N > 16384`` elements that XLA splits (the
    first kernel reads the input, the second the ``k1`` f32 sums), or why not."""
    k1, k2, pad = split_params(N)
    inner, outer = plan((k1, k2), (1,), narrow), plan((k1,), (0,), False)
    if isinstance(inner, str) or isinstance(outer, str):
        return f"a sum of {N} elements split as [{k1}, {k2}]: " + (
            inner if isinstance(inner, str) else str(outer)
        )
    return SumPlan("split", 1, N, pad=pad, inner=inner, outer=outer)


#: the warp counts of the measured Triton normalization tiles, and their longest row
TRITON_WARPS = (1, 2, 4)
TRITON_LONGEST = 4096
#: the longest row measured in a tile of several rows
TRITON_MULTI_LONGEST = 1024


def triton_plan(
    shape: tuple, axes: tuple, config: tuple, narrow: bool, mixed: bool = False
) -> SumPlan | str:
    """The :class:`SumPlan` of an f32 sum in a Triton normalization fusion of ``config``
    (``(tile sizes, warps, TMA)``), or why it is refused (module docstring); ``narrow``:
    the fusion's inputs are narrower than 32 bits (bf16 widened inside it), ``mixed``:
    some of them are and some are not."""
    tile, warps, tma = config
    rank = len(shape)
    n = shape[-1] if rank else 1
    row = tuple(a % rank for a in axes) == (rank - 1,)
    if rank == 1 and row and tuple(tile) == ():  # a whole vector to one value, TMA or not
        return _vector_plan(n, warps, narrow)
    # measured: a [1, n] tile of a normalization's output (strided lanes), and a tile of
    # the row sums themselves, over the kept dimensions (contiguous lanes)
    norm_tile = tuple(tile[-1:]) == (n,)  # whole rows, one or several a program
    rows_tile = rank == 2 and tuple(tile) in ((1,), (2,))  # the measured [1] and [2]
    if not row or tma or not (norm_tile or rows_tile) or (mixed and norm_tile):
        return (f"a Triton reduce of {list(shape)} over {list(axes)} with tile {list(tile)}, "
                f"{warps} warps{' and TMA' if tma else ''}: not measured (f32 rows in a "
                "[1, n] tile are)")  # fmt: skip
    if norm_tile:
        return _norm_plan(math.prod(shape[:-1]), n, math.prod(tile[:-1]), warps, narrow)
    if warps != 1 or not 64 < n < 128:
        return (f"a Triton reduce fusion of rows of {n} with {warps} warps: not measured "
                "(rows of 65 to 127 with one warp are)")  # fmt: skip
    return SumPlan("triton_rows", math.prod(shape[:-1]), n)


def _vector_plan(n: int, warps: int, narrow: bool) -> SumPlan | str:
    """The order of a Triton reduce fusion that sums a whole vector of ``n`` (output tile
    ``[]``, one program; module docstring), or why it is refused."""
    P = _next_pow2(n)
    spt = min(4, P // (LANES * warps))
    # measured: 2 or 4 elements a lane with one warp, 4 with two and four
    if (narrow or warps not in TRITON_WARPS or not 32 < n <= TRITON_LONGEST
            or spt not in ((2, 4) if warps == 1 else (4,))):  # fmt: skip
        return (f"a Triton reduce of a vector of {n} to one value with {warps} warps"
                f"{' (a narrow input)' if narrow else ''}: not measured (f32 vectors of 33 "
                f"to {TRITON_LONGEST}, with 1 warp and 2 or 4 elements a lane or 2 or 4 warps "
                "and 4, are)")  # fmt: skip
    return SumPlan("triton_row", 1, n, warps, lanes=LANES, spt=spt)


def _norm_plan(R: int, n: int, rows: int, warps: int, narrow: bool = False) -> SumPlan | str:
    """The order of a Triton normalization tile of ``rows`` whole rows of ``n`` (module
    docstring), or why it is refused; ``narrow``: of 16-bit inputs."""
    P = _next_pow2(n)
    if rows == 1:
        if (
            warps not in ((1, 2) if narrow else TRITON_WARPS)  # 16-bit: 1 and 2 measured
            or not 32 < n <= TRITON_LONGEST
            or P < 64 * warps
        ):
            return (f"a Triton reduce of a row of {n} in a [1, {n}] tile with {warps} warps"
                    f"{' of 16-bit inputs' if narrow else ''}: not measured (rows of 33 to "
                    f"{TRITON_LONGEST}, padded to a power of two of at least 64 per warp, with "
                    "1, 2 or 4 warps (1 or 2 for 16-bit inputs) are)")  # fmt: skip
        return SumPlan("triton_row", R, n, warps)
    # several rows a program: v contiguous elements a lane (Triton's vectorized layout:
    # 4, 2 or 1, as the row's length is a multiple of), lanes and then warps along the
    # row as far as it reaches, the rest across rows
    # (16 bytes a lane: 8 elements of 16-bit inputs, read where the length is a multiple)
    vec = 8 if narrow else 4
    v = vec if n % vec == 0 else 2 if n % 2 == 0 else 1
    lanes = min(LANES, P // v)
    along = min(warps, max(1, P // (v * lanes)))
    if (
        warps not in (2, 4)
        or not 32 < n <= TRITON_MULTI_LONGEST
        or not _pow2(rows)
        or v != vec
        or (LANES // lanes) * (warps // along) > rows
        or (narrow and lanes != LANES)  # 16-bit inputs: measured with 32 lanes
    ):
        return (f"a Triton reduce of rows of {n} in a [{rows}, {n}] tile with {warps} warps"
                f"{' of 16-bit inputs' if narrow else ''}: not measured (tiles of 2 to 8 rows "
                f"of 36 to {TRITON_MULTI_LONGEST} elements, a multiple of 4 (of 8 for 16-bit "
                "inputs), with 2 or 4 warps, every thread on one row, are)")  # fmt: skip
    return SumPlan("triton_row", R, n, along, lanes=lanes, spt=v)


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _triton_row(x, warps: int, lanes: int = LANES, spt: int = 1):
    """The row padded with +0 to a power of two ``P``; lane ``l`` of warp ``w`` (``W``
    warps and ``L`` lanes along the row) holds the elements ``spt (l + L w + L W r) + s``
    (``s < spt``, ``r = 0 ... P / (spt L W) - 1``) and adds them as a pairwise tree in the
    order of ``(r, s)`` (``(e0 + e1) + (e2 + e3)``, ...); the lanes by the shuffle tree,
    then the warps' results by the same tree."""
    P = _next_pow2(x.shape[-1])
    pad = jnp.zeros(x.shape[:-1] + (P - x.shape[-1],), F32)
    reps = P // (spt * lanes * warps)
    q = jnp.concatenate([x, pad], axis=-1).reshape(x.shape[:-1] + (reps, warps, lanes, spt))
    regs = [q[..., r, :, :, s] for r in range(reps) for s in range(spt)]
    while len(regs) > 1:  # pairwise, neighbours first
        regs = [_add(regs[i], regs[i + 1]) for i in range(0, len(regs), 2)]
    per_warp = _tree(regs[0], lanes)  # [..., warps]
    while per_warp.shape[-1] > 1:  # the warps' results: the same tree (half apart first)
        h = per_warp.shape[-1] // 2
        per_warp = _add(per_warp[..., :h], per_warp[..., h:])
    return per_warp[..., 0]


def _triton_rows(x):
    """Lane ``l`` adds ``(x[4 l] + x[4 l + 1]) + (x[4 l + 2] + x[4 l + 3])`` of the row
    padded with +0 to 128; the lanes by the shuffle tree."""
    pad = jnp.zeros(x.shape[:-1] + (128 - x.shape[-1],), F32)
    q = jnp.concatenate([x, pad], axis=-1).reshape(x.shape[:-1] + (LANES, 4))
    lanes = _add(_add(q[..., 0], q[..., 1]), _add(q[..., 2], q[..., 3]))
    return _tree(lanes)


def plan(shape: tuple, axes: tuple, narrow: bool) -> SumPlan | str:
    """The :class:`SumPlan` of an f32 ``reduce_sum`` of ``shape`` over ``axes``, or why
    it is refused; ``narrow``: the fusion's smallest input is narrower than 32 bits."""
    rank = len(shape)
    axes = tuple(sorted(a % rank for a in axes)) if rank else ()
    if not axes:
        return "a reduce over no axis"
    if axes == tuple(range(rank - len(axes), rank)):  # a suffix: rows (all: one row)
        R, n = math.prod(shape[: rank - len(axes)]), math.prod(shape[rank - len(axes) :])
        if n < LANES and LANES % n != 0:
            return SumPlan("loop_row", R, n)
        if _pow2(n) and n <= LANES * (4 if narrow else 2):
            return f"a row reduction of {n} elements (XLA's multi-row emitter: not derived)"
        if n > 16384:
            return f"a row reduction of {n} elements (XLA splits it in two kernels)"
        T = row_threads(n)
        if n % 2 == 1 or 2 * T > n:
            v = 1
        elif not narrow:
            v = 2
        else:
            v = 2 if 4 * T > n else 4 if n % 4 == 0 else 2
        return SumPlan("row", R, n, v)
    if axes == tuple(range(len(axes))):  # a prefix: columns
        R, n = math.prod(shape[: len(axes)]), math.prod(shape[len(axes) :])
        if R < 32 or (R < 64 and n < 32) or (R < 128 and n < 8) or (R < 256 and n < 3):
            return f"a column reduction of {R} x {n} (XLA's elemental loop: not measured)"
        if LANES % n == 0:
            return f"a column reduction of {n} columns (XLA's small-column emitter: not derived)"
        if R > 4096:
            return f"a column reduction of {R} rows (XLA splits it in two kernels)"
        return SumPlan("column", R, n)
    return f"a reduce over axes {axes} of a rank-{rank} array (neither rows nor columns)"


def _tree(a, lanes: int = LANES):
    """The shuffle-down tree over the last axis (``lanes``, 32 unless told): ``a[0]``
    after ``a[i] += a[i + d]`` for ``d = 16, 8, 4, 2, 1`` (from ``lanes / 2``)."""
    for d in (16, 8, 4, 2, 1):
        if d >= lanes:
            continue
        a = jnp.concatenate([_add(a[..., :d], a[..., d : 2 * d]), a[..., d:]], axis=-1)
    return a[..., 0]


def _row(x, p: SumPlan):
    T, v, n = row_threads(p.n), p.v, p.n
    m = min(16 // v, -(-(n // v) // T))
    acc = jnp.zeros(x.shape[:-1] + (T,), F32)
    t = np.arange(T)
    for s1 in range(m):
        j = s1 * T + t
        valid = j < n // v
        for s2 in range(v):
            idx = np.where(valid, j * v + s2, 0)
            acc = jnp.where(valid, _add(acc, x[..., idx]), acc)
    warps = _tree(acc.reshape(x.shape[:-1] + (T // LANES, LANES)))
    if T == LANES:
        return warps[..., 0]
    pad = jnp.zeros(x.shape[:-1] + (LANES - T // LANES,), F32)
    return _tree(jnp.concatenate([warps, pad], axis=-1))


def _column(x, p: SumPlan):
    parts = []
    for w in range(LANES):
        acc = jnp.zeros(x.shape[1:], F32)
        for r in range(w, p.R, LANES):
            acc = _add(acc, x[r])
        parts.append(acc)
    return _tree(jnp.stack(parts, axis=-1))


def _loop(x):  # over the last axis, in index order
    acc = jnp.zeros(x.shape[:-1], F32)
    for i in range(x.shape[-1]):
        acc = _add(acc, x[..., i])
    return acc


def reduce_sum(x, shape: tuple, axes: tuple, p: SumPlan):
    """``x`` (f32, ``shape``) summed over ``axes`` in the order of :class:`SumPlan`."""
    rank = len(shape)
    kept = tuple(d for i, d in enumerate(shape) if i not in {a % rank for a in axes})
    if p.kind == "split":
        assert p.inner is not None and p.outer is not None
        flat = jnp.concatenate([jnp.asarray(x, F32).reshape(-1), jnp.zeros(p.pad, F32)])
        rows = _row(flat.reshape(p.inner.R, p.inner.n), p.inner)
        return reduce_sum(rows, (p.inner.R,), (0,), p.outer).reshape(kept)
    x = jnp.asarray(x, F32).reshape(p.R, p.n)
    if p.kind == "triton_row":
        return _triton_row(x, p.v, p.lanes, p.spt).reshape(kept)
    if p.kind == "triton_rows":
        return _triton_rows(x).reshape(kept)
    if p.kind == "row":
        out = _row(x, p)
    elif p.kind == "loop_row":
        out = _loop(x)
    else:
        out = _column(x, p)
    return out.reshape(kept)
