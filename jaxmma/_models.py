"""Which arithmetic model computes a form on an architecture (docs/numerics.md).

``mma_bits(ins, A, B, C)`` takes raw-bit matrices and returns raw-bit D. Floating forms
use the fused-block model of :mod:`_numerics` with the architecture's parameters; sm_90
runs ``.e4m3``/``.e5m2`` through two f16 MMAs and a final add, as its compiler emits it;
integer and single-bit forms are exact integer arithmetic (:mod:`_integer`); ``.f64`` is an
fma chain (:mod:`_float64`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from . import _fixed, _formats, _numerics
from ._numerics import BlockModel

FP8 = ("e4m3", "e5m2")
F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")


def family(n: int) -> int:
    """The numerics generation of a PTX target number."""
    for gen in (120, 100, 90, 89, 80, 75, 70):
        if n >= gen:
            return gen
    raise ValueError(f"no model for sm_{n}")


def block_model(arch: int, ins) -> BlockModel:
    """F, L and e_zero of the fused-block model (docs/numerics.md) for this form and arch."""
    gen = family(arch)
    a = ins.atype
    inputs = "tf32" if a == "tf32" else ("8bit" if a in F8F6F4 else "16bit")
    if gen == 70 or (gen == 75 and ins.shape == "m8n8k4"):
        return BlockModel(F=23, L=4, e_zero_f32=-131, e_zero_f16=-19)
    if gen in (75, 80):
        return BlockModel(F=24, L=4 if inputs == "tf32" else 8, e_zero_f32=-132, e_zero_f16=-20)
    if gen == 89:
        L = {"tf32": 4, "16bit": 8, "8bit": 16}[inputs]
        fp8 = inputs == "8bit"  # F = 13 and f32 results truncated to e8m13 (MMA-Sim)
        return BlockModel(
            F=13 if fp8 else 24,
            L=L,
            e_zero_f32=-132,
            e_zero_f16=-20,
            f32_mantissa=13 if fp8 else 23,
        )
    L = {"tf32": 8, "16bit": 16, "8bit": 32}[inputs]
    if gen == 90 and inputs == "8bit":
        L = 16  # the f16 MMAs sm_90 runs fp8 through
    return BlockModel(F=25, L=L, e_zero_f32=-133, e_zero_f16=-21)


def gather_rows(B, sparse_idx):
    """B ``[..., K, N]`` -> ``[..., M, K/2, N]``: the rows each stored A element meets."""
    if sparse_idx is None:
        return B
    return jnp.take_along_axis(B[..., None, :, :], sparse_idx[..., :, :, None], axis=-2)


def mma_bits(ins, A, B, C, *, scales=None, model=None, sparse_idx=None):
    """Raw-bit ``D = A @ B + C``.

    ``sparse_idx``: for ``mma.sp``, int32 ``[..., M, K/2]``, the dense column (k) of each
    stored element of the compressed A; the stored products alone enter the sum.
    """
    if ins.opcode == "wmma.mma" and model is None and family(ins.arch_number) == 90:
        return sm90_wmma(ins, A, B, C)
    if ins.opcode == "wgmma.mma_async":  # Hopper's warpgroup MMA has its own parameters
        from . import _wgmma

        return _wgmma.mma_bits(ins, A, B, C, model=model)
    a = ins.atype
    B = gather_rows(B, sparse_idx)
    rows = sparse_idx is not None
    if a in ("s8", "u8", "s4", "u4", "b1"):
        from . import _integer

        return _integer.mma_bits(ins, A, B, C, b_rows=rows)
    if a == "f64":
        from . import _float64

        return _float64.mma_bits(ins, A, B, C)  # no sparse .f64 form
    if ins.stype:
        from . import _scaling

        return _scaling.mma_bits(ins, A, B, C, scales, model=model, b_rows=rows)
    return float_mma_bits(ins, A, B, C, model=model, b_rows=rows)


def _fields(fmt, bits, kind):
    if kind in ("f8f6f4",) and fmt in F8F6F4:
        from . import _packing

        bits = _packing.from_container(bits, fmt)
    return _formats.fields(fmt, bits)


def float_mma_bits(ins, A, B, C, *, model=None, b_rows=False, block=None):
    """D bits for the floating forms (f16, bf16, tf32, fp8, kind::f8f6f4).

    ``block``: override the products per fused block (chained instructions).
    """
    fa, fb = _fields(ins.atype, A, ins.kind), _fields(ins.btype, B, ins.kind)
    if model == "exact":
        prod = _numerics.product_terms(fa, fb, ins.atype, ins.btype, b_rows=b_rows)
        width = _numerics.exact_width(ins.atype, ins.btype, ins.ctype, ins.k)
        return _numerics.block_chain(prod, C, ins.ctype, ins.dtype, _numerics.EXACT, width)
    arch = ins.arch_number
    bm = block_model(arch, ins)
    if block is not None:
        bm = dataclasses.replace(bm, L=block)
    if family(arch) == 90 and ins.atype in FP8:
        return sm90_fp8(ins, fa, fb, C, bm, b_rows)
    if family(arch) == 90 and ins.shape == "m8n8k4":
        return sm90_m8n8k4(ins, fa, fb, C)
    return _chain(ins, fa, fb, C, ins.ctype, bm, b_rows)


def _sig_bits(ins) -> int:
    return max(_numerics.man_bits(ins.atype), _numerics.man_bits(ins.btype)) + 1


def _chain(ins, fa, fb, C, ctype, bm, b_rows, order_fmt=None, ks=None):
    """The block chain over the products of k in ``ks`` (all by default), C first.

    The fixed-width engine (:mod:`_fixed`) computes it where it covers the model; the
    general multi-limb engine otherwise. Both give the same bits.
    """
    if not b_rows and _fixed.supports(bm, ins.dtype, _sig_bits(ins)):
        a = _fixed.operand(fa, ins.atype, order_fmt)
        b = _fixed.operand(fb, ins.btype, order_fmt)
        if ks is not None:
            a, b = _fixed.cols(a, ks), _fixed.rows(b, ks)
        return _fixed.chain(a, b, C, ctype, ins.dtype, bm)
    prod = _numerics.product_terms(fa, fb, ins.atype, ins.btype, order_fmt=order_fmt, b_rows=b_rows)
    if ks is not None:
        prod = _numerics.take(prod, ks)
    return _numerics.block_chain(prod, C, ctype, ins.dtype, bm)


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
            return mma_bits(as_f32, A, B, _numerics.convert(C, "f16", "f32"))
        return _numerics.convert(mma_bits(as_f32, A, B, C), "f32", "f16")
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
    zero = _zeros(C.shape)
    first = _chain(ins, fa, fb, zero, ins.dtype, bm, b_rows, "f16", lo)
    second = _chain(ins, fa, fb, first, ins.dtype, bm, b_rows, "f16", hi)
    return _numerics.ieee_add(second, C, ins.dtype)


def sm90_m8n8k4(ins, fa, fb, C):
    """``m8n8k4 .f16`` on sm_90: scalar f32 code, as ptxas emits it (no tensor core).

    Read off the SASS for sm_90 (see docs/numerics.md): each f16 converts exactly to f32
    (``HADD2.F32``); for an f32 result, ``s = fma(a0, b0, +0)``, then ``s = fma(ak, bk, s)``
    for k = 1, 2, 3 (``FFMA``), and ``D = C + s`` (``FADD``); for an f16 result,
    ``s01 = fma(a1, b1, a0 * b0)``, ``s23 = fma(a3, b3, a2 * b2)``, ``D = f16((C + s01) +
    s23)`` (``FMUL``/``FFMA``/``FADD``, then ``F2FP`` to nearest even). Every step rounds
    to nearest even in f32 with subnormals.
    """
    prod = _numerics.product_terms(fa, fb, ins.atype, ins.btype)  # [..., m, n, 4]
    c32 = C if ins.ctype == "f32" else _numerics.convert(C, "f16", "f32")
    zero = _zeros(C.shape)

    def fma(acc, p):  # p: one product term [..., 1]; acc: f32 bits
        out = _numerics.ieee_sum(_numerics.concat(p, _numerics.c_terms(acc, "f32")), "f32")
        return out, None

    def steps(idx):  # the products of k in idx, stacked on a leading axis for lax.scan
        return _numerics.Terms(*(jnp.moveaxis(x[..., list(idx)], -1, 0)[..., None] for x in prod))

    if ins.dtype == "f32":
        s, _ = jax.lax.scan(fma, zero, steps(range(4)))
        return _numerics.ieee_add(c32, s, "f32")
    # pairs (0, 1) and (2, 3) side by side on a trailing axis: fma(a1, b1, a0 * b0), ...
    pair = lambda i: _numerics.Terms(*(x[..., i::2] for x in prod))  # noqa: E731
    first = _numerics.Terms(*(x[..., None] for x in pair(0)))  # [..., m, n, 2, 1]
    second = _numerics.Terms(*(x[..., None] for x in pair(1)))
    q = _numerics.ieee_sum(first, "f32")
    s2 = _numerics.ieee_sum(_numerics.concat(second, _numerics.c_terms(q, "f32")), "f32")
    u, _ = jax.lax.scan(
        lambda acc, x: (_numerics.ieee_add(acc, x, "f32"), None), c32, jnp.moveaxis(s2, -1, 0)
    )
    return _numerics.convert(u, "f32", "f16")


def _zeros(shape):
    """+0 accumulators, kept out of XLA's constant folding (slow on large constants)."""
    return jax.lax.optimization_barrier(jnp.zeros(shape, jnp.uint32))
