"""Operations of the native executor's Pallas kernels that ``jnp`` does not lower as the
model needs: :func:`chained_dot` (``acc + a @ b`` as a single Triton ``tt.dot`` with
``acc`` as its C operand, the accumulation setting that JAX's own ``jnp.dot`` lowering
leaves at the compiler's default made explicit) and :func:`ffma` (float32 ``x * y + z``
rounded once: the device's FFMA; JAX has no fused multiply-add).

Why a primitive of our own: JAX's Pallas Triton lowering emits ``tt.dot`` without
``maxNumImpreciseAcc``, whose default (0) makes the compiler split every fp8 ``wgmma``
off into a zero accumulator and add it into C with a float32 add after each instruction
(k = 32): the bits of ``promote_every=1``, not of a chain (measured on an H100: other
bits on nearly every element; its speed is in benchmarks/RESULTS.md). Triton's own front end asks
for no such split on sm_90 (``max_num_imprecise_acc`` 2**30): the accumulator then stays
in the tensor core across instructions, as in the ``wgmma`` model. ``tf32`` asks for the
tensor cores' tf32 inputs (JAX's lowering of a float32 ``jnp.dot`` picks IEEE or tf32 by
its precision argument; here the form decides).

Off a GPU (Pallas interpret mode) :func:`chained_dot` is ``acc + a @ b`` in float32 at
the highest precision: the model's bits only where every sum is exact, as
:func:`jaxmma.gemm._native.gemm_bits` documents for interpreted runs; :func:`ffma` is the
emulated FFMA (:func:`jaxmma.arith._ieee.ffma_f32`), exact everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core
from jax.interpreters import mlir

from .. import arith

F32 = jnp.float32
#: larger than any dot's K: the compiler never splits the accumulation
NO_SPLIT = 2**30

chained_dot_p = jex_core.Primitive("jaxmma_chained_dot")


def chained_dot(a, b, acc, *, tf32: bool = False):
    """``acc + a @ b`` as one tensor-core chain: ``a [m, k]``, ``b [k, n]`` (fp8, f16,
    bf16, or float32 with ``tf32``), ``acc`` float32 ``[m, n]``."""
    return chained_dot_p.bind(a, b, acc, tf32=bool(tf32))


def _abstract(a, b, acc, *, tf32):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"chained_dot: expected a [m, k] and b [k, n], got {a.shape}, {b.shape}")
    if acc.shape != (a.shape[0], b.shape[1]) or acc.dtype != F32:
        raise ValueError(
            f"chained_dot: expected a float32 acc of shape {(a.shape[0], b.shape[1])}, "
            f"got {acc.dtype} {acc.shape}"
        )
    return jax.core.ShapedArray(acc.shape, F32)


def _reference(a, b, acc, *, tf32):
    del tf32
    d = jax.lax.dot(a.astype(F32), b.astype(F32), precision=jax.lax.Precision.HIGHEST)
    return acc + d


chained_dot_p.def_abstract_eval(_abstract)
chained_dot_p.def_impl(_reference)
mlir.register_lowering(chained_dot_p, mlir.lower_fun(_reference, multiple_results=False))


ffma_p = jex_core.Primitive("jaxmma_ffma")


def ffma(x, y, z):
    """float32 ``x * y + z`` with one rounding to nearest even (same shapes)."""
    return ffma_p.bind(x, y, z)


def _ffma_abstract(x, y, z):
    if not (x.shape == y.shape == z.shape) or {x.dtype, y.dtype, z.dtype} != {jnp.dtype(F32)}:
        raise ValueError(f"ffma: expected float32 operands of one shape, got {x}, {y}, {z}")
    return jax.core.ShapedArray(x.shape, F32)


def _ffma_reference(x, y, z):
    bits = [jax.lax.bitcast_convert_type(v, jnp.uint32) for v in (x, y, z)]
    return jax.lax.bitcast_convert_type(arith.ffma_f32(*bits), F32)


ffma_p.def_abstract_eval(_ffma_abstract)
ffma_p.def_impl(_ffma_reference)
mlir.register_lowering(ffma_p, mlir.lower_fun(_ffma_reference, multiple_results=False))


def _ffma_rule(ctx, x, y, z):
    from jax._src.lib.mlir.dialects import math as math_dialect  # noqa: PLC0415

    del ctx
    return math_dialect.fma(x, y, z)


def _triton_rule(ctx, a, b, acc, *, tf32):
    """The Triton lowering: ``tt.dot(a, b, acc)`` with no accumulation split."""
    from jax._src.lib.triton import dialect as tt  # noqa: PLC0415 (GPU lowering only)

    del ctx
    precision = tt.InputPrecision.TF32 if tf32 else None
    return tt.dot(a, b, acc, input_precision=precision, max_num_imprecise_acc=NO_SPLIT)


def triton_reason() -> str | None:
    """Why this JAX cannot lower :func:`chained_dot` and :func:`ffma` in a Pallas Triton
    kernel (None: it can; the rules are registered on first call)."""
    global _REGISTERED
    if _REGISTERED is not None:
        return _REGISTERED or None
    try:
        from jax._src.lib.triton import dialect as tt  # noqa: PLC0415
        from jax._src.pallas.triton import lowering  # noqa: PLC0415

        if not hasattr(tt, "dot") or not hasattr(lowering, "triton_lowering_rules"):
            raise ImportError("no tt.dot builder or lowering table")
        lowering.triton_lowering_rules[chained_dot_p] = _triton_rule
        lowering.triton_lowering_rules[ffma_p] = _ffma_rule
        _REGISTERED = ""
    except ImportError as err:  # a JAX without the Pallas Triton lowering
        _REGISTERED = f"this JAX's Pallas Triton lowering is not usable ({err})"
    return _REGISTERED or None


_REGISTERED: str | None = None
