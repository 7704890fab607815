"""``wgmma.mma_async`` (PTX ISA 9.7.15.5.2): warpgroup-level MMA of sm_90a, matrix level.

``D = A * B + D`` over a warpgroup (128 threads) with M = 64, N = 8 ... 256 and K = 8
(``.tf32``), 16 (``.f16``/``.bf16``), 32 (``.e4m3``/``.e5m2``, ``.s8``/``.u8``) or 256
(``.b1``). The register and descriptor level (fragments of 128 threads, shared-memory
matrix descriptors) is not emulated yet: :func:`matrix_mma` computes on the logical
matrices, ``A [..., M, K]`` and ``B [..., K, N]``. The transposes ``imm-trans-a/b`` only
change how shared memory is read, so the matrix level has no use for them.

Numerics (docs/wgmma.md): one fused block per instruction, the model of :mod:`_numerics`
with the Hopper ``wgmma`` parameters of MMA-Sim (Xie et al. 2025):

* ``.f16``/``.bf16``/``.tf32``: F = 25, L = K (16, 16, 8), f32 results truncated,
  f16 results rounded to nearest even; the parameters of sm_90 ``mma``.
* ``.e4m3``/``.e5m2`` (any mix): F = 13, L = 32, f32 results truncated to 13 mantissa
  bits (e8m13), f16 results rounded to nearest even. Unlike sm_90 ``mma.sync`` fp8, which
  the compiler runs through two f16 HMMAs (F = 25), wgmma fp8 is native.
* zero terms count with e_zero = -133 (f32 results) / -21 (f16 results), as in sm_90.
* ``.s8``/``.u8``: exact sum, wrapped or (``.satfinite``) clamped once; ``.b1``:
  ``popc(a AND b)`` summed, wrapped (:mod:`_integer`).

``scale-d`` false gives ``D = A * B`` (the accumulator does not enter: it is replaced by
+0); ``imm-scale-a/b = -1`` negate every element of A/B (the sign bit is flipped).

Checked on an H100 (``tests/golden/sm_90/wgmma-sm_90a.npz``): 19 forms, every element of
D equal, scale-d and imm-scale included.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import models, util
from ..bits import from_bits, to_bits
from ..models import WGMMA_INTEGER as INTEGER

#: the sign bit of each floating input format (tf32: the f32 register's)
SIGN_BIT = {"f16": 15, "bf16": 15, "tf32": 31, "e4m3": 7, "e5m2": 7}


def _check_options(ins, scale_d, scale_a, scale_b) -> None:
    if not isinstance(scale_d, (bool, int)) or scale_d not in (0, 1):
        raise ValueError(f"scale_d: expected True or False, got {scale_d!r}")
    for name, v in (("scale_a", scale_a), ("scale_b", scale_b)):
        if isinstance(v, bool) or v not in (1, -1):
            raise ValueError(f"{name} (imm-{name.replace('_', '-')}): expected 1 or -1, got {v!r}")
        if v == -1 and ins.atype in INTEGER:
            raise ValueError(
                f"{name}=-1: imm-{name.replace('_', '-')} is an operand of the floating "
                f"wgmma.mma_async forms only, not of .{ins.atype}; allowed: 1"
            )


def negate(bits, fmt: str):
    """Raw bits with the sign of every element flipped (imm-scale = -1)."""
    return bits ^ jnp.uint32(1 << SIGN_BIT[fmt])


def matrix_mma(ins, A, B, C, *, scale_d=True, scale_a=1, scale_b=1, model=None):
    """Matrix-level ``wgmma.mma_async``: ``D = (scale_a * A) @ (scale_b * B) + C``.

    Args:
      ins: a ``wgmma.mma_async`` :class:`jaxmma.Instruction`.
      A: ``[..., M, K]``, B: ``[..., K, N]``, C: ``[..., M, N]``, in the element dtypes
        (``jnp.float8_e4m3fn``, ``jnp.bfloat16``, ``jnp.float32`` for ``.tf32``,
        ``jnp.int8``/``jnp.uint8``, ...) or as unsigned raw bits (``.b1``: one bit per
        element). C is in the destination dtype (``dtype`` is the accumulator type).
      scale_d: the ``scale-d`` predicate; False gives ``D = A * B`` (C is not read).
      scale_a, scale_b: ``imm-scale-a``/``imm-scale-b``, 1 or -1 (floating forms only).
      model: None (Hopper's numerics) or ``"exact"``.
    Returns:
      D ``[..., M, N]`` in the destination dtype (``jnp.float32``, ``jnp.float16`` or
      ``jnp.int32``). Leading dimensions broadcast.

    Example:
      >>> import jaxmma, jax.numpy as jnp
      >>> ins = jaxmma.instruction("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3")
      >>> A = jnp.zeros((64, 32), jnp.float8_e4m3fn).at[:, 0].set(1).at[:, 1].set(2.0**-6)
      >>> B = jnp.zeros((32, 8), jnp.float8_e4m3fn).at[0].set(1).at[1].set(2.0**-8)
      >>> D = ins.mma(A, B, jnp.zeros((64, 8), jnp.float32))
      >>> float(D[0, 0]) == 1.0  # 2**-14 lies below the 13 fraction bits that wgmma keeps
      True
    """
    if ins.opcode != "wgmma.mma_async":
        raise ValueError(f"ins: expected a wgmma.mma_async instruction, got {ins.text}")
    if model not in (None, "exact"):
        raise ValueError(f"model must be None (Hopper's) or 'exact', got {model!r}")
    _check_options(ins, scale_d, scale_a, scale_b)
    Ab = to_bits(ins.atype, A, "A")
    Bb = to_bits(ins.btype, B, "B")
    Cb = to_bits(ins.ctype, C, "C")
    M, K, N = util.matrix_dims(Ab, Bb, Cb)
    if Bb.shape[-2] != K or Cb.shape[-2:] != (M, N):
        raise ValueError(
            f"B: expected [..., {K}, N] and C [..., {M}, N] for A of shape {Ab.shape}; "
            f"got B {Bb.shape}, C {Cb.shape}"
        )
    if scale_a == -1:
        Ab = negate(Ab, ins.atype)
    if scale_b == -1:
        Bb = negate(Bb, ins.btype)
    if not scale_d:
        Cb = jnp.zeros_like(Cb)
    lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2], Cb.shape[:-2])
    Ab, Bb, Cb = (jnp.broadcast_to(x, lead + x.shape[-2:]) for x in (Ab, Bb, Cb))
    D = models.mma_bits(ins, Ab, Bb, Cb, model=model)
    return from_bits(ins.dtype, D)


def execute(ins, *args, **kwargs):
    """Register / descriptor level: not emulated yet."""
    raise NotImplementedError(
        f"{ins.text}: the register/descriptor level of wgmma.mma_async (fragments over "
        "128 threads, shared-memory matrix descriptors) is not emulated yet; use the "
        "matrix level ins.mma(A, B, C, scale_d=True, scale_a=1, scale_b=1)"
    )
