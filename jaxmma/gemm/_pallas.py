"""A GEMM-shaped Pallas kernel for the fused-block models: the bits of the XLA path, fast.

:func:`jaxmma.gemm._chain.xla_gemm_bits` runs a GEMM as ``lax.scan`` over k-steps of whole-matrix
model calls; on a GPU XLA turns that into broadcast-multiply-reduce loops that never keep
operands on chip. This module computes the same bits with one Pallas (Triton) kernel: each
program holds one ``BM x BN`` tile of D across K (a ``fori_loop`` over k-steps), and does
the fixed-width engine's work (:mod:`jaxmma._fixed`) per product in 32-bit integers.

Operands are prepared once outside the kernel (elementwise, ``O(MK + KN)``), per element:

* ``order << 16 | nlsb``: the exponent that enters ``e_max`` (``ABSENT`` for zero, NaN
  and Inf) and minus the exponent of the significand's unit, the significand normalized
  to the format's full width ``w`` (so every product of two is below ``2**(wa + wb)``);
* ``word``: the normalized magnitude (A's shifted left by ``S = F + 2 - wa - wb``), the
  sign in bit 31, NaN / Inf / "zero or special" flags in bits 30 / 29 / 28;

both stored K-major (``[K, M]`` and ``[K, N]``), so that one k of a tile is one contiguous
load; per row of A (column of B) and fused block an ``info`` word (whether the block
holds a zero or special (bit 16), a NaN (17), an Inf (18)) and a sign word (bit j: the
sign of the block's column j); and per fused block and tile of D whether an Inf meets it.

Per product the term of the model, ``trunc(|a b| * 2**(lsb_a + lsb_b - unit))`` with
``unit = e_max - F``, is ``(ma * mb) >> r`` with ``r = unit + S - lsb_a - lsb_b`` (never
negative: every term lies below ``2**(e_max + 2)``; clamped to 31); the signed term is
``x ^ sa ^ sb`` (one's complement) plus one per negative product, and the number of
negative products is ``popcount(signs_a ^ signs_b)``. Whether any product is zero (the
``e_zero`` rule) is ``zero_a | zero_b`` per row and column. Specials: without an Inf in
the tile's block, NaN is ``nan_a | nan_b``; with one, the codes (+-1, 0, +-Inf, NaN) of
the products are summed in float32 as the engine does. The accumulator is rounded once per
block (:func:`round_bits`, the engine's rounding in 32-bit operations) and IEEE additions
(sm_90 fp8, ``promote_every``) are done in integers (:func:`ieee_add`), so the kernel
gives the same bits interpreted on a CPU as compiled on a GPU.

Covered (:func:`plan`): dense floating ``mma`` forms whose blocks the fixed-width
engine computes in one int32 group (sm_80 and later bf16 / f16 / tf32 with f32 or f16
accumulators), sm_90 ``.e4m3`` / ``.e5m2`` with f32 accumulators (two chains over
interleaved k, then one IEEE add), and the dense floating ``wgmma`` forms (sm_90a: bf16 /
f16 / tf32, and fp8 in blocks of 32 products with F = 13), with or without
``promote_every``. Anything else runs on the XLA path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import arith, models, util
from ..bits import CANONICAL_NAN, FP8, OUT_FORMATS, fields
from . import _partition
from ._executor import Executor

I32 = jnp.int32
#: order of zero, NaN and Inf elements: never the largest (e_max starts at e_zero or C's)
ABSENT = -(1 << 14)  # two of them still fit 16 bits
ZERO_BIT = 1 << 16
NAN_BIT = 1 << 17
INF_BIT = 1 << 18
W_NAN = 1 << 30
W_INF = 1 << 29
W_ZERO = 1 << 28
W_MAG = W_ZERO - 1
#: the largest block the kernel sums in one int32 group (the sign bits of a sign word;
#: besides, ``L`` terms below ``2**(F + 2)`` each must sum below ``2**31``)
MAX_BLOCK = 32

#: "auto": the kernel where it covers the form and the default backend is a GPU, the XLA
#: path elsewhere; "pallas": the kernel wherever it covers the form (interpreted when the
#: default backend is not a GPU); "xla": never the kernel. Read when a GEMM is configured.
MODE = "auto"
MODES = ("auto", "pallas", "xla")


@contextlib.contextmanager
def path(mode: str):
    """Run GEMMs configured inside the block on ``mode`` (see :data:`MODE`)."""
    global MODE
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    old, MODE = MODE, mode
    try:
        yield
    finally:
        MODE = old


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Kernel tiling: a ``bm x bn`` tile of D per program."""

    bm: int = 64
    bn: int = 64
    num_warps: int = 4
    num_stages: int = 1


#: tiling used on the GPU (chosen from the compiled code's registers, not yet timed: 16
#: outputs per thread, no spills); interpreted runs use :data:`INTERPRET_TILES`
TILES = Tiles(bm=32, bn=64, num_warps=4)
INTERPRET_TILES = Tiles(bm=16, bn=16)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything static the kernel needs about one form (see :func:`plan`)."""

    atype: str
    btype: str
    ctype: str
    dtype: str
    k: int  # the instruction's k: columns per step
    perm: tuple[int, ...] | None  # the step's columns in the order the blocks take them
    blocks: tuple[tuple[int, int], ...]  # per step: (offset, length) of each fused block
    fp8: bool  # sm_90 fp8: the blocks chain from +0 and C is added last (IEEE)
    order_fmt: str | None
    F: int
    e_zero: int
    f32_mantissa: int
    promote_every: int | None
    unroll: int = 2  # columns per iteration of the kernel's loops over a block

    @property
    def wa(self) -> int:
        return arith.man_bits(self.atype) + 1

    @property
    def wb(self) -> int:
        return arith.man_bits(self.btype) + 1

    @property
    def shift(self) -> int:
        return self.F + 2 - self.wa - self.wb


def plan(cfg) -> Plan | None:
    """The kernel's plan for a GEMM configuration, or None where it does not cover it."""
    ins = cfg.ins
    if ins.opcode not in ("mma", "wgmma.mma_async") or ins.sparse or ins.stype or ins.kind:
        return None
    if ins.atype not in ("bf16", "f16", "tf32", *FP8):
        return None
    if ins.dtype not in ("f32", "f16") or ins.ctype != ins.dtype:
        return None  # (mixed C / D types chain through a conversion: the XLA path)
    arch = ins.arch_number
    try:
        gen = models.family(arch)
    except ValueError:
        return None
    wgmma = ins.opcode == "wgmma.mma_async"
    if wgmma and gen != 90:
        return None
    bm = models.wgmma_block_model(ins) if wgmma else models.block_model(arch, ins)
    sig_bits = max(arith.man_bits(ins.atype), arith.man_bits(ins.btype)) + 1
    if not arith.fixed_supports(bm, ins.dtype, sig_bits) or bm.F + 2 > 31:
        return None
    if gen == 90 and ins.shape == "m8n8k4":
        return None
    k = ins.k
    fp8 = ins.atype in FP8 and not wgmma  # wgmma fp8: one chain, C first
    if fp8:
        if gen != 90 or ins.dtype != "f32" or ins.ctype != "f32":
            return None
        lo = tuple(i for i in range(k) if i % 4 < 2)
        hi = tuple(i for i in range(k) if i % 4 >= 2)
        perm = lo + hi  # each chain's columns side by side
        blocks = tuple(
            (c + s, min(bm.L, len(lo) - s)) for c in (0, len(lo)) for s in range(0, len(lo), bm.L)
        )
        order_fmt = "f16"
    else:
        perm = None
        blocks = tuple((s, min(bm.L, k - s)) for s in range(0, k, bm.L))
        order_fmt = None
    if any(n > MAX_BLOCK or n << (bm.F + 2) > 1 << 31 for _, n in blocks):
        return None
    return Plan(
        atype=ins.atype,
        btype=ins.btype,
        ctype=ins.ctype,
        dtype=ins.dtype,
        k=k,
        perm=perm,
        blocks=blocks,
        fp8=fp8,
        order_fmt=order_fmt,
        F=bm.F,
        e_zero=bm.e_zero(ins.dtype),
        f32_mantissa=bm.f32_mantissa,
        promote_every=cfg.promote_every,
    )


def use_kernel(cfg, scales=None) -> bool:
    """Whether :func:`jaxmma.gemm._executors.gemm_bits` runs this configuration on the kernel."""
    mode = cfg.path
    if mode == "xla" or scales is not None or plan(cfg) is None:
        return False
    return mode == "pallas" or jax.default_backend() == "gpu"


# ---------------------------------------------------------------------------------------
# Operand preparation (XLA, elementwise)
def _operand(fmt: str, bits, order_fmt, w: int, pre_shift: int):
    """Raw bits ``[..., R, K]`` -> (order << 16 | nlsb, word) int32 ``[..., R, K]``."""
    f = fields(fmt, bits)
    finite = (f.sig != 0) & ~f.nan & ~f.inf
    mag = jnp.where(finite, f.sig, jnp.uint32(0))
    msb = 31 - util.clz(mag).astype(I32)
    norm = jnp.where(finite, (w - 1) - msb, 0)
    magn = (mag << norm.astype(jnp.uint32)).astype(I32)
    order = jnp.where(finite, arith.operand_order(f, fmt, order_fmt), I32(ABSENT))
    nlsb = jnp.where(finite, norm - f.exp, 0)
    word = (
        (magn << pre_shift)
        | (f.sign.astype(I32) << 31)
        | jnp.where(f.nan, I32(W_NAN), 0)
        | jnp.where(f.inf, I32(W_INF), 0)
        | jnp.where(finite, 0, I32(W_ZERO))
    )
    return (order << 16) | (nlsb & 0xFFFF), word


def _info(word, blocks, k: int):
    """Per row (of ``word [..., R, S * k]``), step and block: the flags word (whether the
    block holds a zero or special, a NaN, an Inf) and the sign word (bit j: the sign of
    the block's column j); ``[..., S * len(blocks), R]`` each."""
    S = word.shape[-1] // k
    w = word.reshape(word.shape[:-1] + (S, k))
    flags, signs = [], []
    for off, n in blocks:
        x = w[..., off : off + n]  # [..., R, S, n]
        signs.append(
            functools.reduce(jnp.bitwise_or, (arith.srl(x[..., j], 31) << j for j in range(n)))
        )
        info = jnp.zeros(x.shape[:-1], I32)
        for w_bit, bit in ((W_ZERO, ZERO_BIT), (W_NAN, NAN_BIT), (W_INF, INF_BIT)):
            info = info | jnp.where(jnp.any((x & w_bit) != 0, axis=-1), I32(bit), 0)
        flags.append(info)

    def rows_last(parts):  # [..., R, S, nblk] -> [..., S * nblk, R]
        x = jnp.stack(parts, axis=-1)
        return jnp.swapaxes(x.reshape(x.shape[:-2] + (S * len(blocks),)), -1, -2)

    return rows_last(flags), rows_last(signs)


# ---------------------------------------------------------------------------------------
# The kernel
def _code(word):
    """The engine's special code of an element: +-1 finite nonzero, 0, +-Inf, NaN."""
    one = jnp.where(word < 0, jnp.float32(-1), jnp.float32(1))
    code = jnp.where((word & W_ZERO) != 0, jnp.float32(0), one)
    code = jnp.where((word & W_INF) != 0, one * jnp.float32(jnp.inf), code)
    return jnp.where((word & W_NAN) != 0, jnp.float32(jnp.nan), code)


def _columns(ow_ref, w_ref, col):
    """One column of the operand words at ``col``: (order, nlsb, magnitude, sign mask)."""
    ow, w = ow_ref[col, :], w_ref[col, :]
    return ow >> 16, (ow << 16) >> 16, w & W_MAG, w >> 31


def _block(p: Plan, refs, s, j: int, c, c_fmt: str):
    """One fused block (``p.blocks[j]`` of step ``s``) with accumulator ``c`` (``c_fmt``
    bits, int32 ``[BM, BN]``) -> the block's ``p.dtype`` bits.

    Values the rounding needs are computed after the loops over the block's columns from
    values the loops carry, so that few per-output arrays stay live across them.
    """
    aow, aw, ai, asg, bow, bw, bi, bsg, tile_inf = refs
    off, L = p.blocks[j]
    U = p.unroll if L % p.unroll == 0 else 1
    k0 = s * p.k + off
    b = s * len(p.blocks) + j

    c_fin, c_ord, *_ = arith.c_fields(c, c_fmt)
    e_max = jnp.where(c_fin, c_ord, p.e_zero)
    zero = ((ai[b, :] & ZERO_BIT)[:, None] | (bi[b, :] & ZERO_BIT)[None, :]) != 0
    e_max = jnp.where(zero, jnp.maximum(e_max, p.e_zero), e_max)

    def order_max(i, e):
        for u in range(U):
            col = k0 + i * U + u
            e = jnp.maximum(e, (aow[col, :] >> 16)[:, None] + (bow[col, :] >> 16)[None, :])
        return e

    ushift = lax.fori_loop(0, L // U, order_max, e_max) + (p.shift - p.F)  # unit + S

    def terms(i, carry):
        total, c = carry
        for u in range(U):
            col = k0 + i * U + u
            _, na, ma, sa = _columns(aow, aw, col)
            _, nb, mb, sb = _columns(bow, bw, col)
            r = jnp.minimum(ushift + na[:, None] + nb[None, :], 31)
            x = (ma[:, None] * mb[None, :]) >> r
            total = total + (x ^ sa[:, None] ^ sb[None, :])  # -x - 1 if negative
        return total, c

    total, c = lax.fori_loop(0, L // U, terms, (jnp.zeros_like(c), c))
    total = total + lax.population_count(asg[b, :][:, None] ^ bsg[b, :][None, :])
    unit = ushift - p.shift

    # C's term: trunc(sig * 2**(exp - unit)), where exp - unit <= F - man(C) (below 0
    # where the grid is coarser than C's significand: wgmma fp8, F = 13)
    c_fin, _, c_exp, c_sig, c_neg, _, _ = arith.c_fields(c, c_fmt)
    up = max(p.F - arith.man_bits(c_fmt), 0)
    c_term = arith.srl(jnp.where(c_fin, c_sig, 0) << up, jnp.minimum(up - c_exp + unit, 31))
    c_term = jnp.where(c_neg, -c_term, c_term)
    neg, mag = arith.sum_two(total, c_term)
    if p.dtype == "f32" and p.f32_mantissa == 23:
        bits = arith.round_f32_rz(neg, mag, unit)
    else:
        bits = arith.round_bits(neg, mag, unit, p.dtype, p.f32_mantissa, nearest=p.dtype == "f16")

    out = OUT_FORMATS[p.dtype]
    inf_bits = I32(((1 << out.exp) - 1) << out.man)
    neg_inf = arith.i32((((1 << out.exp) - 1) << out.man) | (1 << (out.nbits - 1)))
    nan_bits = I32(CANONICAL_NAN[p.dtype])

    def with_inf(bits, c):  # the codes of C and the products summed as the engine does
        _, _, _, _, c_neg, c_nan, c_inf = arith.c_fields(c, c_fmt)
        c_inf_code = jnp.where(c_neg, jnp.float32(-jnp.inf), jnp.float32(jnp.inf))
        c_code = jnp.where(c_nan, jnp.float32(jnp.nan), jnp.where(c_inf, c_inf_code, 0.0))

        def body(i, acc):
            col = k0 + i
            return acc + _code(aw[col, :])[:, None] * _code(bw[col, :])[None, :]

        acc = lax.fori_loop(0, L, body, c_code)
        bits = jnp.where(acc == jnp.inf, inf_bits, bits)
        bits = jnp.where(acc == -jnp.inf, neg_inf, bits)
        return jnp.where(jnp.isnan(acc), nan_bits, bits)

    def without_inf(bits, c):  # NaN where a NaN meets; an Inf C stays
        _, _, _, _, c_neg, c_nan, c_inf = arith.c_fields(c, c_fmt)
        bits = jnp.where(c_inf, jnp.where(c_neg, neg_inf, inf_bits), bits)
        nan = ((ai[b, :] & NAN_BIT)[:, None] | (bi[b, :] & NAN_BIT)[None, :]) != 0
        return jnp.where(nan | c_nan, nan_bits, bits)

    return lax.cond(tile_inf[b] != 0, with_inf, without_inf, bits, c)


def _step(p: Plan, refs, s, acc, c_fmt: str):
    """One k-step: the instruction with accumulator ``acc``."""
    if not p.fp8:
        for j in range(len(p.blocks)):
            acc = _block(p, refs, s, j, acc, c_fmt if j == 0 else p.dtype)
        return acc
    d = jnp.zeros_like(acc)
    for j in range(len(p.blocks)):
        d = _block(p, refs, s, j, d, p.dtype)
    return arith.int32_ieee_add(d, acc)


def _kernel(*refs, p: Plan, steps: int):
    *ins, c_ref, d_ref = refs
    c = c_ref[...]
    P = p.promote_every
    if P is None:
        first = 0
        if p.ctype != p.dtype:  # the first step reads C in its own format
            c, first = _step(p, ins, 0, c, p.ctype), 1
        d_ref[...] = lax.fori_loop(first, steps, lambda s, a: _step(p, ins, s, a, p.dtype), c)
        return

    P = jnp.int32(min(P, steps))  # P >= steps: one group, the same bits

    def body(s, carry):
        total, acc = carry
        acc = _step(p, ins, s, acc, p.dtype)
        flush = (lax.rem(s + 1, P) == 0) | (s == steps - 1)
        total = jnp.where(flush, arith.int32_ieee_add(total, acc), total)
        return total, jnp.where(flush, 0, acc)

    total, _ = lax.fori_loop(0, steps, body, (c, jnp.zeros_like(c)))
    d_ref[...] = total


def _pad(x, axis: int, size: int):
    pad = size - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def gemm_bits(cfg, A, B, C, *, interpret=None, tiles: Tiles | None = None):
    """The bits of :func:`jaxmma.gemm._executors.gemm_bits` (no ``scales``) through the kernel.

    ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M, N]`` raw bits (uint32), broadcast
    over leading dimensions. ``interpret``: run the kernel in Pallas interpret mode (the
    default off a GPU backend). Raises ValueError for a configuration :func:`plan` does
    not cover.
    """
    if plan(cfg) is None:
        raise ValueError(f"the GEMM kernel does not cover {cfg.ins.text} on {cfg.ins.arch}")
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    # split over devices as XLA splits a dot (batch, M, N; never K): jaxmma/gemm/_partition.py
    return _partition.sharded(_gemm_bits, cfg, A, B, C, interpret=interpret, tiles=tiles)


def _gemm_bits(cfg, A, B, C, *, interpret: bool, tiles: Tiles | None):
    """:func:`gemm_bits` on one device."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    p = plan(cfg)
    t = tiles or (INTERPRET_TILES if interpret else TILES)
    lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
    M, K = A.shape[-2:]
    N = B.shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    A = jnp.broadcast_to(A, lead + A.shape[-2:]).reshape((nb, M, K))
    B = jnp.broadcast_to(B, lead + B.shape[-2:]).reshape((nb, K, N))
    C = jnp.broadcast_to(C, lead + C.shape[-2:]).reshape((nb, M, N))
    S = max(1, -(-K // p.k))
    Mp, Np, Kp = -(-M // t.bm) * t.bm, -(-N // t.bn) * t.bn, S * p.k
    A = _pad(_pad(A, -1, Kp), -2, Mp)
    B = _pad(_pad(B, -2, Kp), -1, Np)
    C = _pad(_pad(C, -2, Mp), -1, Np)

    if p.perm is not None:  # each block's columns contiguous inside its step
        cols = np.add.outer(np.arange(S) * p.k, np.asarray(p.perm)).reshape(-1)
        A, B = A[..., cols], B[..., cols, :]
    ops = []
    for x, fmt, w, pre in (
        (A, p.atype, p.wa, p.shift),
        (jnp.swapaxes(B, -1, -2), p.btype, p.wb, 0),
    ):
        ow, word = _operand(fmt, x, p.order_fmt, w, pre)  # [nb, R, Kp]
        info, signs = _info(word, p.blocks, p.k)  # [nb, S * nblk, R]
        ops += [jnp.swapaxes(ow, -1, -2), jnp.swapaxes(word, -1, -2), info, signs]
    # per block and tile of D: whether an Inf meets its rows of A or columns of B
    tiles_a = jnp.any((ops[2] & INF_BIT).reshape(nb, -1, Mp // t.bm, t.bm) != 0, axis=-1)
    tiles_b = jnp.any((ops[6] & INF_BIT).reshape(nb, -1, Np // t.bn, t.bn) != 0, axis=-1)
    tile_inf = (tiles_a[..., :, None] | tiles_b[..., None, :]).astype(I32)
    C = lax.bitcast_convert_type(C, I32)

    nblk = S * len(p.blocks)
    a_spec = pl.BlockSpec((None, Kp, t.bm), lambda b, i, j: (b, 0, i))
    b_spec = pl.BlockSpec((None, Kp, t.bn), lambda b, i, j: (b, 0, j))
    ai_spec = pl.BlockSpec((None, nblk, t.bm), lambda b, i, j: (b, 0, i))
    bi_spec = pl.BlockSpec((None, nblk, t.bn), lambda b, i, j: (b, 0, j))
    flag_spec = pl.BlockSpec((None, nblk, None, None), lambda b, i, j: (b, 0, i, j))
    c_spec = pl.BlockSpec((None, t.bm, t.bn), lambda b, i, j: (b, i, j))
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    D = pl.pallas_call(
        functools.partial(_kernel, p=p, steps=S),
        out_shape=jax.ShapeDtypeStruct((nb, Mp, Np), I32),
        grid=(nb, Mp // t.bm, Np // t.bn),
        in_specs=[a_spec, a_spec, ai_spec, ai_spec, b_spec, b_spec, bi_spec, bi_spec, flag_spec]
        + [c_spec],
        out_specs=c_spec,
        interpret=interpret,
        **kwargs,
    )(*ops, tile_inf, C)
    D = lax.bitcast_convert_type(D[:, :M, :N], jnp.uint32)
    return D.reshape(lead + (M, N))


class Pallas(Executor):
    """The emulating kernel as an executor: the configurations :func:`use_kernel` names."""

    name = "pallas"

    def covers(self, cfg, scales):
        return use_kernel(cfg, scales)

    def chain(self, cfg, A, B, C, scales):
        return gemm_bits(cfg, A, B, C)
