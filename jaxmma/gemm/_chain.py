"""The XLA executor: a GEMM as the instruction's chain of model calls over its k-steps.

The operands are laid out as k-steps (each a whole ``[M, k] x [k, N]`` slab) and handed
to the models floor's chain, :func:`jaxmma.models.chain_bits`: one call of the one
numerics entry point (the same function the register and matrix levels reach) per step,
in a ``lax.scan``, so the program and its compile time do not grow with K, and the working
set is one slab. It computes every form (sparse, block-scaled, promotion, mixed C and D
types) on every backend: the reference the other executors are tested against.

Ragged sizes are padded as a kernel pads them: M and N need nothing (the models are
elementwise over rows and columns); K is padded with +0 elements up to a multiple of k
(the hardware sums those zeros like any other term), block scales with 1.0.

``promote_every=P`` (f32 accumulators): the instruction's accumulator restarts from +0,
and after every P k-steps (and once more for a remainder) it is added into an f32 total
that started at C, by one IEEE add rounded to nearest (FADD), as fp8 GEMMs that promote
to CUDA cores do (DeepSeek-V3, arXiv:2412.19437: every 128 elements of K).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith, models, operands, util
from ._config import Config
from ._executor import Executor


def _lead(*xs):
    return jnp.broadcast_shapes(*(x.shape[:-2] for x in xs))


_pad_axis = util.pad_axis


def _steps(x, axis: int, nsteps: int):
    """Split ``axis`` (of size nsteps * w) into steps and move them to the front."""
    axis = axis % x.ndim
    shape = x.shape[:axis] + (nsteps, x.shape[axis] // nsteps) + x.shape[axis + 1 :]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def xla_gemm_bits(cfg: Config, A, B, C, *, scales=None):
    """Raw-bit GEMM as XLA operations: ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M,
    N]`` bits (leading dimensions broadcast) -> D bits, the instruction chained over the
    k-steps (:func:`jaxmma.models.chain_bits`). ``scales``: ``(SA [..., M, K / block],
    SB [..., K / block, N])`` for block-scaled forms. For sparse forms A is the dense
    (structured) matrix."""
    ins = cfg.ins
    lead = _lead(A, B, C, *(scales or ()))
    A = jnp.broadcast_to(A, lead + A.shape[-2:])
    B = jnp.broadcast_to(B, lead + B.shape[-2:])
    C = jnp.broadcast_to(C, lead + C.shape[-2:])
    S = max(1, -(-A.shape[-1] // ins.k))
    A = _steps(_pad_axis(A, -1, S * ins.k), -1, S)
    B = _steps(_pad_axis(B, -2, S * ins.k), -2, S)
    if scales is not None:
        nblk = operands.num_blocks(ins)
        one = {"ue8m0": 0x7F, "ue4m3": 0x38}[ins.stype]  # 1.0: scales of padded blocks
        SA, SB = (jnp.broadcast_to(s, lead + s.shape[-2:]) for s in scales)
        scales = (_steps(_pad_axis(SA, -1, S * nblk, one), -1, S),)
        scales += (_steps(_pad_axis(SB, -2, S * nblk, one), -2, S),)
    idx = bad = None
    if ins.sparse:
        A, idx, bad = _compress_steps(ins, A)
    if cfg.promote_every is not None:
        D = _promoted(ins, cfg.promote_every, S, A, B, C, scales, idx)
    else:
        D = models.chain_bits(ins, A, B, C, scales=scales, sparse_idx=idx)
    # rows whose A lacks the sparse structure (traced A, unchecked): poison bits; a valid
    # A leaves every bit as it is
    return D if bad is None else operands.poison_rows(ins, D, bad)


def _promoted(ins, P: int, S: int, A, B, C, scales, idx):
    """The chain of the S k-steps (stacked on the leading axis) in groups of P, each from
    +0 and added into an f32 total that started at C (see the module docstring)."""
    # a short last group runs in the same (once-compiled) loop, its missing steps masked
    # out. P >= S is one group of all S steps (the same bits): capped, so that a huge P
    # allocates nothing
    P = min(P, S)
    G = -(-S // P)
    real = np.arange(G * P).reshape(G, P) < S
    fill = np.minimum(np.arange(G * P), S - 1)  # any step fills the masked places
    xs = {"a": A, "b": B}
    if scales is not None:
        xs["sa"], xs["sb"] = scales
    if idx is not None:
        xs["idx"] = idx
    xs = jax.tree.map(lambda x: x[fill] if G * P > S else x, xs)
    xs = jax.tree.map(lambda x: x.reshape((G, P) + x.shape[1:]), xs)
    zero = models.zero_bits(C.shape)

    def group(total, g):
        x, live = g
        sc = (x["sa"], x["sb"]) if "sa" in x else None
        acc = models.chain_bits(
            ins, x["a"], x["b"], zero, scales=sc, sparse_idx=x.get("idx"), live=live, from_d=True
        )
        return arith.ieee_add(total, acc, "f32"), None

    total = C if ins.ctype == "f32" else arith.convert(C, ins.ctype, "f32")
    total, _ = jax.lax.scan(group, total, (xs, jnp.asarray(real)))
    return total


def _compress_steps(ins, a):
    """Dense structured A steps ``[S, ..., M, k]`` -> compressed values and their dense
    columns, ``[S, ..., M, k/2]`` each (M padded to a multiple of m with zero rows), and
    bool ``[..., M]``: the rows with a chunk of too many non-zeros in any step."""
    M = a.shape[-2]
    Mp = -(-M // ins.m) * ins.m
    a = _pad_axis(a, -2, Mp)
    tiles = a.reshape(a.shape[:-2] + (Mp // ins.m, ins.m, ins.k))
    vals, idx, bad = operands.sparse_matrix_operands(ins, tiles, None, rows=True)
    back = lambda x: x.reshape(a.shape[:-2] + (Mp, ins.k // 2))[..., :M, :]  # noqa: E731
    bad = jnp.any(bad.reshape(a.shape[:-2] + (Mp,)), axis=0)[..., :M]
    return back(vals), back(idx), bad


class Xla(Executor):
    """The XLA chain as an executor: every form on every backend."""

    name = "xla"

    def covers(self, cfg, scales):
        return True

    def chain(self, cfg, A, B, C, scales):
        return xla_gemm_bits(cfg, A, B, C, scales=scales)
