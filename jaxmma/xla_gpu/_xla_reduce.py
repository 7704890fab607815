"""The orders in which XLA:GPU's split-K reduce fusions add the f32 partials.

XLA:GPU splits K into S slices (f32 partials ``[S, ..., M, N]``) and reduces them in a
separate fusion. Its emitter fixes the order of the IEEE f32 adds (docs/xla_gpu.md;
each order below was read off an H100 by FPRev probes, arXiv:2411.00442):

* a loop fusion (``kind=kLoop``): in slice order from +0, ``"sequential"``;
* XLA's native reduction emitter (``kind=kInput``): 32 lanes, lane ``i`` adding the
  slices ``i, i + 32, i + 64, ...`` in turn, then ``q_i + q_(i + 16)`` halving across
  the lanes (:func:`native_order`; measured for S = 32, 64 and 128: for S <= 64 the
  same tree as halving from the start, ``"halving"``);
* a Triton fusion (``"__triton"``): a butterfly tree that follows Triton's blocked layout
  of the ``[S] + tile`` block (:func:`triton_tree`), each tile size rounded up to a
  power of two as Triton's blocks are (read off an H100 for a tile of 80 at S = 16).

Triton's layout rules (public Triton source, ``BlockedEncodingAttr`` construction, the
coalescing pass and the reduce lowering), as they apply to a reduce over dimension 0 of
a ``[S, t_1, ..., t_r]`` f32 block with ``W`` warps of 32 lanes:

* each thread holds ``v`` contiguous elements of the last dimension: 4 (16-byte vector
  loads) unless the fusion may use TMA, then 1;
* lanes, then warps, are handed out from the last dimension to the first, each
  dimension taking as many as its size over ``v`` (its size for the others) allows; the
  first dimension takes what is left;
* so slice ``s`` is held by lane bits ``s mod L``, warp bits ``(s / L) mod Wd`` and a
  repetition ``s / (L * Wd)`` (``L`` lanes and ``Wd`` warps along dimension 0);
* the reduce adds first inside each thread (its repetitions, pairwise: neighbours, then
  pairs of pairs), then across lanes by shuffles (the highest lane bit first), then
  across warps through shared memory (the highest warp bit first).
"""

from __future__ import annotations

LANES = 32


def _pow2(x: int) -> bool:
    return x >= 1 and not x & (x - 1)


def butterfly(S: int, bits: list) -> tuple | int:
    """The pairing tree that adds slices differing in bit ``bits[0]`` first, then pairs
    of those differing in ``bits[1]``, ...; ``bits`` names each bit of ``0 .. S-1`` once."""
    nodes = {s: s for s in range(S)}
    for b in bits:
        nodes = {s: (nodes[s], nodes[s | (1 << b)]) for s in nodes if not s & (1 << b)}
    (root,) = nodes.values()
    return root


def _log2(x: int) -> int:
    return x.bit_length() - 1


def triton_layout(shape: list, num_warps: int, vector: int) -> tuple:
    """``(threads_per_warp, warps_per_cta)`` of Triton's blocked layout of ``shape``
    (row major, ``vector`` elements per thread along the last dimension)."""
    rank = len(shape)
    tpw, wpc = [1] * rank, [1] * rank
    lanes, warps = LANES, num_warps
    for d in reversed(range(1, rank)):
        per = vector if d == rank - 1 else 1
        tpw[d] = max(1, min(lanes, max(1, shape[d] // per)))
        wpc[d] = max(1, min(warps, max(1, shape[d] // (per * tpw[d]))))
        lanes //= tpw[d]
        warps //= wpc[d]
    tpw[0], wpc[0] = lanes, warps
    return tpw, wpc


def triton_tree(S: int, tile: list, num_warps: int, tma: bool, where: str = "reduce"):
    """The pairing tree of a Triton reduce over S partials (see the module docstring).

    ``tile``: the fusion's output tile (``output_tiles`` of its config); ``tma``: its
    ``is_tma_allowed``. Raises ValueError for a block this rule does not cover."""
    if not (_pow2(S) and S >= 2 and _pow2(num_warps) and all(t >= 1 for t in tile)):
        raise ValueError(
            f"{where}: a Triton reduce of S = {S} partials with tile {list(tile)} and "
            f"{num_warps} warps is not covered (S and the warps powers of two only)"
        )
    # a tile size that is not a power of two is padded to the next one (Triton's blocks
    # are powers of two; the padded elements are masked and never meet a real one)
    tile = [1 << (t - 1).bit_length() for t in tile]
    shape = [S] + list(tile)
    numel = S
    for t in tile:
        numel *= t
    vector = 1 if tma else max(1, min(4, tile[-1], numel // (LANES * num_warps)))
    tpw, wpc = triton_layout(shape, num_warps, vector)
    if tpw[0] * wpc[0] > S:
        raise ValueError(
            f"{where}: the Triton layout of block {shape} with {num_warps} warps spreads "
            f"{tpw[0] * wpc[0]} threads over S = {S} partials (replicated elements): not "
            "covered"
        )
    lane_bits = _log2(tpw[0])
    warp_bits = _log2(wpc[0])
    n = _log2(S)
    rep = list(range(lane_bits + warp_bits, n))
    lanes = list(reversed(range(lane_bits)))
    warps = list(reversed(range(lane_bits, lane_bits + warp_bits)))
    return butterfly(S, rep + lanes + warps)


#: the lanes of XLA's native column reduction that hold partials of their own
NATIVE_LANES = 32


def native_order(S: int, where: str = "reduce"):
    """XLA's native (``kInput``) column reduction over ``S`` partials, where it was
    measured (FPRev probes on an H100, ``tests/golden/xla/``): S = 2, 32 and 64 add
    ``p_i + p_(i + S/2)`` halving (``"halving"``); S = 128 gives each of 32 lanes the
    slices ``i, i + 32, i + 64, i + 96``, added in that order, and then halves across
    the lanes (a pairing tree; for S <= 64 the same tree is the halving one). Any other
    S is refused."""
    if S == 2 or S in (32, 64):
        return "halving"
    if S == 128:
        lanes = []
        for i in range(NATIVE_LANES):
            t = i
            for r in range(1, S // NATIVE_LANES):
                t = (t, i + r * NATIVE_LANES)
            lanes.append(t)
        while len(lanes) > 1:
            h = len(lanes) // 2
            lanes = [(lanes[i], lanes[i + h]) for i in range(h)]
        return lanes[0]
    raise ValueError(
        f"{where}: XLA's native reduction emitter over S = {S} partials: its order was "
        "measured for S = 2, 32, 64 and 128 only"
    )
