"""The one arithmetic entry point: which model computes a form on an architecture.

``mma_bits(ins, A, B, C)`` takes raw-bit matrices and returns raw-bit D; every level
(register, matrix, ``wmma``, ``wgmma``, the GEMM layer) reaches the arithmetic through it
(docs/numerics.md). Floating forms use the fused-block model of
:mod:`jaxmma.arith._numerics` with the parameters of :mod:`jaxmma.models._table`, chained
along k by :func:`jaxmma.models._chain.chain`; sm_90 runs ``.e4m3``/``.e5m2`` through two
f16 MMAs and a final add, as its compiler emits it; block-scaled forms go to
:mod:`jaxmma.models._scaled`, ``wgmma`` to :mod:`jaxmma.models._wgmma`, ``tcgen05.mma``
to :mod:`jaxmma.models._tcgen05`; integer and
single-bit forms are exact integer arithmetic (:mod:`jaxmma.arith._integer`); ``.f64`` is
an fma chain (:mod:`jaxmma.arith._float64`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith
from ..bits import F8F6F4, FP8, fields, from_container
from . import _scaled, _tcgen05, _wgmma
from ._chain import chain
from ._table import block_model, family


def gather_rows(B, sparse_idx):
    """B ``[..., K, N]`` -> ``[..., M, K/2, N]``: the rows each stored A element meets."""
    if sparse_idx is None:
        return B
    return jnp.take_along_axis(B[..., None, :, :], sparse_idx[..., :, :, None], axis=-2)


def mma_bits(ins, A, B, C, *, scales=None, model=None, sparse_idx=None, c_shift=0):
    """Raw-bit ``D = A @ B + C``.

    ``sparse_idx``: for ``mma.sp``, int32 ``[..., M, K/2]``, the dense column (k) of each
    stored element of the compressed A; the stored products alone enter the sum.
    ``c_shift``: ``tcgen05.mma`` only, its scale-input-d (``C * 2**-c_shift``).
    """
    if ins.opcode == "wmma.mma" and model is None and family(ins.arch_number) == 90:
        return sm90_wmma(ins, A, B, C)
    if ins.opcode == "wgmma.mma_async":  # Hopper's warpgroup MMA has its own parameters
        return _wgmma.mma_bits(ins, A, B, C, model=model)
    if ins.opcode == "tcgen05.mma":  # Blackwell's 5th-generation tensor core
        return _tcgen05.mma_bits(
            ins, A, B, C, scales=scales, model=model, sparse_idx=sparse_idx, c_shift=c_shift
        )
    if c_shift:
        raise ValueError(f"c_shift: an operand of tcgen05.mma only, not of {ins.text}")
    a = ins.atype
    B = gather_rows(B, sparse_idx)
    rows = sparse_idx is not None
    if a in ("s8", "u8", "s4", "u4", "b1"):
        return arith.integer_mma_bits(ins, A, B, C, b_rows=rows)
    if a == "f64":
        return arith.float64_mma_bits(ins, A, B, C)  # no sparse .f64 form
    if ins.stype:
        return _scaled.mma_bits(ins, A, B, C, scales, model=model, b_rows=rows)
    return float_mma_bits(ins, A, B, C, model=model, b_rows=rows)


def _fields(fmt, bits, kind):
    if kind in ("f8f6f4",) and fmt in F8F6F4:
        bits = from_container(bits, fmt)
    return fields(fmt, bits)


def float_mma_bits(ins, A, B, C, *, model=None, b_rows=False, block=None):
    """D bits for the floating forms (f16, bf16, tf32, fp8, kind::f8f6f4).

    ``block``: override the products per fused block (chained instructions).
    """
    fa, fb = _fields(ins.atype, A, ins.kind), _fields(ins.btype, B, ins.kind)
    if model == "exact":
        prod = arith.product_terms(fa, fb, ins.atype, ins.btype, b_rows=b_rows)
        width = arith.exact_width(ins.atype, ins.btype, ins.ctype, ins.k)
        return arith.block_chain(prod, C, ins.ctype, ins.dtype, arith.EXACT, width)
    arch = ins.arch_number
    bm = block_model(arch, ins)
    if block is not None:
        bm = dataclasses.replace(bm, L=block)
    if family(arch) == 90 and ins.atype in FP8:
        return sm90_fp8(ins, fa, fb, C, bm, b_rows)
    if family(arch) == 90 and ins.shape == "m8n8k4":
        return sm90_m8n8k4(ins, fa, fb, C)
    return chain(ins, fa, fb, C, ins.ctype, bm, b_rows)


def sm90_wmma(ins, A, B, C):
    """``wmma.mma`` on sm_90, as ptxas compiles it (see docs/numerics.md).

    Read off the SASS for sm_90a: ``.f16`` with different C and D types runs
    ``HMMA.16816.F32``: an ``.f16`` C is first converted to f32 (``HADD2.F32``), an ``.f16``
    D is converted from the f32 result (``F2FP``, nearest even). ``.tf32`` m16n16k8 runs two
    chained ``HMMA.1684`` (k = 0-3, then 4-7 with the first result as C). The other types
    run the ``mma`` of the same element types.
    """
    plain = dataclasses.replace(ins, form=dataclasses.replace(ins.form, opcode="mma"))
    if ins.atype == "f16" and ins.ctype != ins.dtype:
        as_f32 = dataclasses.replace(
            plain, form=dataclasses.replace(plain.form, ctype="f32", dtype="f32")
        )
        if ins.ctype == "f16":
            return mma_bits(as_f32, A, B, arith.convert(C, "f16", "f32"))
        return arith.convert(mma_bits(as_f32, A, B, C), "f32", "f16")
    if ins.atype == "tf32":
        return float_mma_bits(ins, A, B, C, block=4)
    return mma_bits(plain, A, B, C)


def sm90_fp8(ins, fa, fb, C, bm, b_rows=False):
    """``.e4m3``/``.e5m2`` on sm_90: two f16 MMAs over interleaved k, then C added last.

    Read off the SASS ptxas emits for sm_90 (docs/numerics.md): each fp8 element converts
    exactly to f16; the low byte pairs of every A/B register feed one HMMA (k = 16j + 4t +
    {0, 1}), the high pairs a second (k = 16j + 4t + {2, 3}) that takes the first's result
    as its C; the first starts from +0. C is then added by one FADD / HADD2 (round to
    nearest even).
    """
    K = fa.sig.shape[-1]
    lo = np.array([k for k in range(K) if (k % 4) < 2])
    hi = np.array([k for k in range(K) if (k % 4) >= 2])
    zero = zero_bits(C.shape)
    first = chain(ins, fa, fb, zero, ins.dtype, bm, b_rows, "f16", lo)
    second = chain(ins, fa, fb, first, ins.dtype, bm, b_rows, "f16", hi)
    return arith.ieee_add(second, C, ins.dtype)


def sm90_m8n8k4(ins, fa, fb, C):
    """``m8n8k4 .f16`` on sm_90: scalar f32 code, as ptxas emits it (no tensor core).

    Read off the SASS for sm_90 (see docs/numerics.md): each f16 converts exactly to f32
    (``HADD2.F32``); for an f32 result, ``s = fma(a0, b0, +0)``, then ``s = fma(ak, bk, s)``
    for k = 1, 2, 3 (``FFMA``), and ``D = C + s`` (``FADD``); for an f16 result,
    ``s01 = fma(a1, b1, a0 * b0)``, ``s23 = fma(a3, b3, a2 * b2)``, ``D = f16((C + s01) +
    s23)`` (``FMUL``/``FFMA``/``FADD``, then ``F2FP`` to nearest even). Every step rounds
    to nearest even in f32 with subnormals.
    """
    prod = arith.product_terms(fa, fb, ins.atype, ins.btype)  # [..., m, n, 4]
    c32 = C if ins.ctype == "f32" else arith.convert(C, "f16", "f32")
    zero = zero_bits(C.shape)

    def fma(acc, p):  # p: one product term [..., 1]; acc: f32 bits
        out = arith.ieee_sum(arith.concat(p, arith.c_terms(acc, "f32")), "f32")
        return out, None

    def steps(idx):  # the products of k in idx, stacked on a leading axis for lax.scan
        return arith.Terms(*(jnp.moveaxis(x[..., list(idx)], -1, 0)[..., None] for x in prod))

    if ins.dtype == "f32":
        s, _ = jax.lax.scan(fma, zero, steps(range(4)))
        return arith.ieee_add(c32, s, "f32")
    # pairs (0, 1) and (2, 3) side by side on a trailing axis: fma(a1, b1, a0 * b0), ...
    pair = lambda i: arith.Terms(*(x[..., i::2] for x in prod))  # noqa: E731
    first = arith.Terms(*(x[..., None] for x in pair(0)))  # [..., m, n, 2, 1]
    second = arith.Terms(*(x[..., None] for x in pair(1)))
    q = arith.ieee_sum(first, "f32")
    s2 = arith.ieee_sum(arith.concat(second, arith.c_terms(q, "f32")), "f32")
    u, _ = jax.lax.scan(
        lambda acc, x: (arith.ieee_add(acc, x, "f32"), None), c32, jnp.moveaxis(s2, -1, 0)
    )
    return arith.convert(u, "f32", "f16")


def zero_bits(shape):
    """+0 accumulators, kept out of XLA's constant folding (slow on large constants)."""
    return jax.lax.optimization_barrier(jnp.zeros(shape, jnp.uint32))
