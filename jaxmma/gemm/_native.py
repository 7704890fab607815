"""The native executor: the GPU's own tensor cores, chained in the modelled order.

Where the GPU at hand executes the requested form with the numerics jaxmma models, the
emulation's bits come from the device itself at its own speed: a Pallas kernel holds one
``bm x bn`` tile of D (started from C, in float32) and adds ``jnp.dot`` of one K tile
after another, in increasing k; the compiler emits the device's matrix instructions
(``wgmma`` on sm_90), each one fused block of the model with the accumulator as C. With
``promote_every=P``, every group of P instruction steps is chained from +0 in a loop of its
own and added into the float32 total (one FADD; the loop keeps the compiler from folding
the total into the chain). The kernel runs exactly the instruction steps the emulation runs
(K padded with +0 to a multiple of k, never more: an extra all-zero step is not a no-op
for every model), and every NaN result leaves as the canonical NaN, as the model's do.

Covered (:func:`why_not`): on a GPU of compute capability 9.0 (H100, H200), f32
accumulators from bf16 x bf16 or f16 x f16 (``wgmma`` sm_90a, and ``mma.sync`` m16n8k16
on sm_90, whose model is the same), with or without ``promote_every``. Not fp8: the
kernel compiler's fp8 products do not follow the model. Evidence: docs/gemm.md ("The
native executor").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

F32 = jnp.float32
EXECUTORS = ("auto", "native", "emulate")
#: element dtypes the kernel feeds to jnp.dot
_DTYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16}
FP8 = ("e4m3", "e5m2")
#: tile of D per program and the largest K tile (elements) per element width
BM, BN = 64, 64
MAX_KT = {"bf16": 64, "f16": 64}
NUM_WARPS = 4


def why_not(ins) -> str | None:
    """Why the form has no native path on any device (None: it has one on sm_90)."""
    if ins.sparse or ins.stype or ins.kind:
        return "sparse and block-scaled forms have no native path on sm_90"
    if ins.dtype != "f32" or ins.ctype != "f32":
        return f"accumulators .{ins.ctype}/.{ins.dtype}: only .f32 accumulators run natively"
    if ins.atype in FP8 or ins.btype in FP8:
        return (
            "fp8: the kernel compiler's fp8 products do not follow the model (measured "
            "on an H100: 410,968 of 637,056 elements differ); sm_90 mma.sync fp8 is "
            "compiled into f16 MMAs besides"
        )
    if ins.atype not in _DTYPES or ins.btype not in _DTYPES or ins.atype != ins.btype:
        return f".{ins.atype}/.{ins.btype} elements: natively only bf16 x bf16 and f16 x f16"
    if ins.opcode == "wgmma.mma_async":
        if ins.arch_number != 90:
            return f"wgmma numerics of {ins.arch}: the native path runs sm_90a's"
        return None
    if ins.opcode == "mma" and ins.arch_number == 90 and ins.shape == "m16n8k16":
        return None
    return f"{ins.text} on {ins.arch}: no sm_90 tensor-core instruction with its numerics"


def device_reason() -> str | None:
    """Why the default device cannot run the native path (None: it can)."""
    if jax.default_backend() != "gpu":
        return f"the default backend is {jax.default_backend()!r}, not a GPU"
    dev = jax.devices()[0]
    cc = getattr(dev, "compute_capability", None)
    if cc is None or str(cc) not in ("9.0",):
        return f"{dev.device_kind} (compute capability {cc}) is not an sm_90 GPU"
    return None


def choose(executor: str, ins, promote_every=None) -> bool:
    """Whether a GEMM runs on the native executor; ``ValueError`` for ``"native"`` where
    it cannot give the modelled bits."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor: expected one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "emulate":
        return False
    form = why_not(ins)
    dev = device_reason()
    if executor == "native" and (form or dev):
        raise ValueError(
            f"executor='native': {ins.text} (arch {ins.arch}) cannot run natively here: "
            f"{form or dev}; use executor='auto' or 'emulate'"
        )
    return form is None and dev is None


def _k_tile(ins, steps: int, promote_every) -> int:
    """The K tile: k times the largest power of two that divides the steps of every
    group (so the kernel runs exactly the emulation's steps), at most :data:`MAX_KT`."""
    if promote_every is None:
        counts = [steps]
    else:
        counts = [promote_every, steps % promote_every]
    j = max(1, MAX_KT[ins.atype] // ins.k)
    while j > 1 and any(c % j for c in counts if c):
        j //= 2
    return ins.k * j


def _dot_tiles(a_ref, b_ref, acc, first, count, kt):
    def body(t, acc):
        k0 = pl.ds((first + t) * kt, kt)
        return acc + jnp.dot(a_ref[:, k0], b_ref[k0, :], preferred_element_type=F32)

    return lax.fori_loop(0, count, body, acc)


def _kernel(a_ref, b_ref, c_ref, d_ref, *, tiles: int, kt: int, per_group: int | None):
    c = c_ref[...]
    if per_group is None:
        d = _dot_tiles(a_ref, b_ref, c, 0, tiles, kt)
    else:
        groups = -(-tiles // per_group)

        def group(g, total):
            n = jnp.minimum(per_group, tiles - g * per_group)
            part = _dot_tiles(a_ref, b_ref, jnp.zeros_like(total), g * per_group, n, kt)
            return total + part  # FADD: a loop's result, which no compiler folds into a dot

        d = lax.fori_loop(0, groups, group, c)
    d_ref[...] = d


def gemm_bits(cfg, A, B, C, *, interpret=None):
    """The bits of :func:`jaxmma.gemm._gemm.gemm_bits` through the device's tensor cores.

    ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M, N]`` raw bits (uint32) of a form
    :func:`why_not` accepts. ``interpret``: Pallas interpret mode (default: off a GPU),
    where ``jnp.dot`` is the host's and gives the model's bits only when every sum is
    exact.
    """
    ins = cfg.ins
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2], C.shape[:-2])
    M, K = A.shape[-2:]
    N = B.shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    S = max(1, -(-K // ins.k))
    P = cfg.promote_every
    kt = _k_tile(ins, S, P)
    Kp, Mp, Np = S * ins.k, -(-M // BM) * BM, -(-N // BN) * BN

    def prep(x, shape, rows, cols, fmt):
        x = jnp.broadcast_to(x, lead + x.shape[-2:]).reshape((nb,) + shape)
        x = jnp.pad(x, ((0, 0), (0, rows - shape[0]), (0, cols - shape[1])))
        if fmt == "f32":
            return lax.bitcast_convert_type(x, F32)
        width = 8 if fmt in ("e4m3", "e5m2") else 16
        narrow = x.astype(jnp.uint8 if width == 8 else jnp.uint16)
        return lax.bitcast_convert_type(narrow, _DTYPES[fmt])

    a = prep(A, (M, K), Mp, Kp, ins.atype)
    b = prep(B, (K, N), Kp, Np, ins.btype)
    c = prep(C, (M, N), Mp, Np, "f32")
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(num_warps=NUM_WARPS, num_stages=3)
    per_group = None if P is None else P * ins.k // kt
    d = pl.pallas_call(
        functools.partial(_kernel, tiles=Kp // kt, kt=kt, per_group=per_group),
        out_shape=jax.ShapeDtypeStruct((nb, Mp, Np), F32),
        grid=(nb, Mp // BM, Np // BN),
        in_specs=[
            pl.BlockSpec((None, BM, Kp), lambda z, i, j: (z, i, 0)),
            pl.BlockSpec((None, Kp, BN), lambda z, i, j: (z, 0, j)),
            pl.BlockSpec((None, BM, BN), lambda z, i, j: (z, i, j)),
        ],
        out_specs=pl.BlockSpec((None, BM, BN), lambda z, i, j: (z, i, j)),
        interpret=interpret,
        **kwargs,
    )(a, b, c)
    bits = lax.bitcast_convert_type(d[:, :M, :N], jnp.uint32)
    bits = jnp.where(jnp.isnan(d[:, :M, :N]), jnp.uint32(0x7FFFFFFF), bits)
    return bits.reshape(lead + (M, N))
