"""The GEMM layer: ``jaxmma.matmul`` and ``jaxmma.dot_general``.

A GEMM of any size is tiled onto one instruction as a CUTLASS-style ``mma.sync`` kernel
runs it: every output tile starts from C and chains the instruction over the k-steps in
increasing k (D of one step is C of the next; converted to the C type, rounded to
nearest, where the form's D and C types differ). Nothing here does arithmetic: each k-step
is one call of :func:`jaxmma._models.mma_bits` (the one numerics entry point, the same
function the register and matrix levels reach) on the whole ``[M, k] x [k, N]`` slab,
since the models are elementwise over the output. The steps run in a ``lax.scan``, so the
program and its compile time do not grow with K, and the working set is one slab.

Ragged sizes are padded as a kernel pads them: M and N need nothing (the models are
elementwise over rows and columns); K is padded with +0 elements up to a multiple of k
(the hardware sums those zeros like any other term).

``promote_every=P`` (f32 accumulators): the instruction's accumulator restarts from +0,
and after every P k-steps (and once more for a remainder) it is added into an f32 total
that started at C, by one IEEE add rounded to nearest (FADD), as fp8 GEMMs that promote
to CUDA cores do (DeepSeek-V3, arXiv:2412.19437: every 128 elements of K).

Derivatives (:mod:`_ste`): straight-through, the tangent of the exact product of the
values the instruction reads.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ..arith import _numerics
from ..bits import _doubles, _formats, _values
from ..instructions._instruction import Instruction
from ..models import _models
from ..operands import _operands, _quant, _scaling, _sparse
from ..operands._quant import Quantized
from ..spec._ptx import shown as _shown
from ..util import _errors, _shapes, _ste, _xla
from . import _block_scaled, _kernel, _native, _pallas
from ._config import FIELDS, Config, GemmOptions, merge, resolve, validate
from ._config import config as config  # the tests' and benchmarks' name for it


class DefaultArchWarning(UserWarning):
    """A GEMM-level call named no ``arch``: the instruction's default (the newest
    architecture that runs the form) was emulated. Given once per form and process."""


_WARNED: set = set()  # the forms DefaultArchWarning was given for


def warn_default_arch(instruction, arch, ins: Instruction) -> None:
    """:class:`DefaultArchWarning` once per form when ``instruction`` is text without
    ``arch`` (an :class:`Instruction` object carries the arch it was built for)."""
    if arch is not None or not isinstance(instruction, str) or ins.text in _WARNED:
        return
    _WARNED.add(ins.text)
    warnings.warn(
        f"arch: not given for {ins.text!r}; emulating {ins.arch}, the newest architecture "
        "that runs the form. Pass arch= (e.g. arch='sm_90' for an H100) to choose the "
        "numerics; the backward GEMMs follow it (docs/gemm.md, 'Architecture')",
        DefaultArchWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------------------
# Bits
def _lead(*xs):
    return jnp.broadcast_shapes(*(x.shape[:-2] for x in xs))


_pad_axis = _shapes.pad_axis


def _steps(x, axis: int, nsteps: int):
    """Split ``axis`` (of size nsteps * w) into steps and move them to the front."""
    axis = axis % x.ndim
    shape = x.shape[:axis] + (nsteps, x.shape[axis] // nsteps) + x.shape[axis + 1 :]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def gemm_bits(cfg: Config, A, B, C, *, scales=None):
    """Raw-bit GEMM: ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M, N]`` -> D bits.

    ``scales``: ``(SA [..., M, K / block], SB [..., K / block, N])`` for block-scaled forms.
    For sparse forms A is the dense (structured) matrix.

    On a GPU backend the forms :mod:`jaxmma._pallas` covers run on its kernel (same bits);
    ``cfg.path`` (from ``_pallas.MODE``) forces either implementation. Operands with a
    zero-size dimension take the XLA chain everywhere (the kernel's grid needs a tile).
    """
    if any(0 in jnp.shape(x) for x in (A, B, C)):  # zero-size: the chain, on every backend
        return xla_gemm_bits(cfg, A, B, C, scales=scales)
    if cfg.native and scales is None:
        return _native.gemm_bits(cfg, A, B, C)
    if _pallas.use_kernel(cfg, scales):
        return _pallas.gemm_bits(cfg, A, B, C)
    if _block_scaled.covers(cfg, scales):  # whole-GEMM block-scaled sums, the same bits
        return _block_scaled.gemm_bits(cfg, A, B, C, scales)
    return xla_gemm_bits(cfg, A, B, C, scales=scales)


def xla_gemm_bits(cfg: Config, A, B, C, *, scales=None):
    """:func:`gemm_bits` as XLA operations: a ``lax.scan`` of model calls over k-steps."""
    ins = cfg.ins
    lead = _lead(A, B, C, *(scales or ()))
    A = jnp.broadcast_to(A, lead + A.shape[-2:])
    B = jnp.broadcast_to(B, lead + B.shape[-2:])
    C = jnp.broadcast_to(C, lead + C.shape[-2:])
    M, K = A.shape[-2:]
    S = max(1, -(-K // ins.k))
    A = _pad_axis(A, -1, S * ins.k)
    B = _pad_axis(B, -2, S * ins.k)
    xs = {"a": _steps(A, -1, S), "b": _steps(B, -2, S)}
    if scales is not None:
        nblk = _scaling.num_blocks(ins)
        one = {"ue8m0": 0x7F, "ue4m3": 0x38}[ins.stype]  # 1.0: scales of padded blocks
        SA, SB = (jnp.broadcast_to(s, lead + s.shape[-2:]) for s in scales)
        xs["sa"] = _steps(_pad_axis(SA, -1, S * nblk, one), -1, S)
        xs["sb"] = _steps(_pad_axis(SB, -2, S * nblk, one), -2, S)
    bad = None
    if ins.sparse:
        xs["a"], xs["idx"], bad = _compress_steps(ins, xs["a"])

    def step(acc, x):
        sc = (x["sa"], x["sb"]) if "sa" in x else None
        d = _models.mma_bits(ins, x["a"], x["b"], acc, scales=sc, sparse_idx=x.get("idx"))
        return d, None

    def chain(c, steps):
        """The steps from C bits ``c`` (the ctype); D bits of the last (the dtype)."""
        if ins.ctype == ins.dtype:
            return jax.lax.scan(step, c, steps)[0]
        # D and C types differ (wmma .f16/.f32 mixes, m8n8k4 .f32.f16.f16.f16): D of one
        # step becomes the next step's C by a conversion rounded to nearest (cvt.rn)
        d, _ = step(c, jax.tree.map(lambda x: x[0], steps))

        def converted(acc, x):
            return step(_numerics.convert(acc, ins.dtype, ins.ctype), x)

        return jax.lax.scan(converted, d, jax.tree.map(lambda x: x[1:], steps))[0]

    P = cfg.promote_every
    if P is None:
        return _poison(ins, chain(C, xs), bad)

    # promotion: groups of P k-steps from +0, each added into the f32 total; a short last
    # group runs in the same (once-compiled) loop, its missing steps masked out. P >= S is
    # one group of all S steps (the same bits): capped, so that a huge P allocates nothing
    P = min(P, S)
    G = -(-S // P)
    real = np.arange(G * P).reshape(G, P) < S
    fill = np.minimum(np.arange(G * P), S - 1)  # any step fills the masked places
    xs = jax.tree.map(lambda x: x[fill] if G * P > S else x, xs)
    xs = jax.tree.map(lambda x: x.reshape((G, P) + x.shape[1:]), xs)
    zero = _models._zeros(C.shape)

    def masked_step(acc, x):  # acc: D bits (f32); the next step's C is acc in the ctype
        c = acc if ins.ctype == ins.dtype else _numerics.convert(acc, ins.dtype, ins.ctype)
        d, _ = step(c, x[0])
        return jnp.where(x[1], d, acc), None

    def group(total, g):
        acc, _ = jax.lax.scan(masked_step, zero, g)
        return _numerics.ieee_add(total, acc, "f32"), None

    total = C if ins.ctype == "f32" else _numerics.convert(C, ins.ctype, "f32")
    total, _ = jax.lax.scan(group, total, (xs, jnp.asarray(real)))
    return _poison(ins, total, bad)


def _poison(ins, D, bad):
    """Rows of D whose A lacks the sparse structure (traced A, unchecked) -> poison bits
    (:func:`jaxmma._sparse.poison_rows`); a valid A leaves every bit as it is."""
    if bad is None:
        return D
    return _sparse.poison_rows(ins, D, bad)


def _compress_steps(ins, a):
    """Dense structured A steps ``[S, ..., M, k]`` -> compressed values and their dense
    columns, ``[S, ..., M, k/2]`` each (M padded to a multiple of m with zero rows), and
    bool ``[..., M]``: the rows with a chunk of too many non-zeros in any step."""
    M = a.shape[-2]
    Mp = -(-M // ins.m) * ins.m
    a = _pad_axis(a, -2, Mp)
    tiles = a.reshape(a.shape[:-2] + (Mp // ins.m, ins.m, ins.k))
    vals, idx, bad = _sparse.matrix_operands(ins, tiles, None, rows=True)
    back = lambda x: x.reshape(a.shape[:-2] + (Mp, ins.k // 2))[..., :M, :]  # noqa: E731
    bad = jnp.any(bad.reshape(a.shape[:-2] + (Mp,)), axis=0)[..., :M]
    return back(vals), back(idx), bad


# ---------------------------------------------------------------------------------------
# Values
def _check_shapes(ins, A, B, C):
    for name, x in (("A", A), ("B", B)):
        if x.ndim < 2:
            raise ValueError(
                f"{name}: expected a matrix [..., rows, cols] (at least 2 dimensions), got "
                f"shape {tuple(x.shape)}"
            )
    if A.shape[-1] != B.shape[-2]:
        raise ValueError(
            f"A, B: contracting sizes differ: A {tuple(A.shape)} has K = {A.shape[-1]}, "
            f"B {tuple(B.shape)} has K = {B.shape[-2]}"
        )
    M, N = A.shape[-2], B.shape[-1]
    try:
        lead = jnp.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(
            f"A, B: batch dimensions {tuple(A.shape[:-2])} and {tuple(B.shape[:-2])} do not "
            "broadcast"
        ) from None
    if C is not None:
        if C.ndim < 2 or C.shape[-2:] != (M, N):
            raise ValueError(
                f"C: expected trailing shape [{M}, {N}] (M of A, N of B) or a shape that "
                f"broadcasts to it (a bias [{N}]), got {tuple(C.shape)}"
            )
        try:
            jnp.broadcast_shapes(lead, C.shape[:-2])
        except ValueError:
            raise ValueError(
                f"C: batch dimensions {tuple(C.shape[:-2])} do not broadcast with {lead}"
            ) from None


def _broadcast_c(C, A, B):
    """A C of fewer dimensions that broadcasts to ``[M, N]`` (a bias ``[N]`` or ``[1, N]``
    as ``F.linear`` adds it, a column ``[M, 1]``) broadcast to it, before any derivative
    rule: the cotangent of C then sums back to C's shape. Anything else is returned as
    given (``_check_shapes`` names what is wrong). NumPy arrays stay NumPy (a double keeps
    its value until the conversion rules see it)."""
    if C is None:
        return None
    a, b = (getattr(x, "elements", x) for x in (A, B))
    if np.ndim(a) < 2 or np.ndim(b) < 2 or np.ndim(C) < 1:
        return C
    M, N, shape = np.shape(a)[-2], np.shape(b)[-1], np.shape(C)
    if len(shape) >= 2 and shape[-2:] == (M, N):
        return C
    try:
        full = np.broadcast_shapes(shape, (M, N))
    except ValueError:
        return C
    if full[-2:] != (M, N):
        return C
    if isinstance(C, (np.ndarray, np.generic)):
        return np.broadcast_to(C, full)
    return jnp.broadcast_to(C, full)


def _c_bits(ins, C, shape):
    if C is None:
        return _models._zeros(shape) if ins.dtype != "f64" else jnp.zeros(shape, jnp.uint64)
    return _operands.to_bits(ins, ins.ctype, C, "C")


def _forward(cfg: Config, A, B, C, q):
    """Values in, values out (the primal of :func:`matmul`)."""
    ins = cfg.ins
    if q is not None:  # block-scaled: the quantized operands carry the bits
        Ab, Bb, SA, SB = _scaling.as_operands(ins, q[0], q[1])
        scales = (SA, SB)
    else:
        Ab = _operands.to_bits(ins, ins.atype, A, "A")
        Bb = _operands.to_bits(ins, ins.btype, B, "B")
        scales = None
    lead = _lead(Ab, Bb)
    shape = lead + (Ab.shape[-2], Bb.shape[-1])
    alpha = _global_scale(q)
    if alpha is not None and C is not None:
        Cb = _c_bits(ins, C, shape)
        D = gemm_bits(cfg, Ab, Bb, _models._zeros(shape), scales=scales)
        D = jax.lax.bitcast_convert_type(_values.from_bits("f32", D) * alpha, jnp.uint32)
        D = _numerics.ieee_add(D, jnp.broadcast_to(Cb, D.shape), "f32")
        return _values.from_bits("f32", D)
    if C is None and cfg.native and scales is None:  # +0: the kernel reads no C
        D = _native.gemm_bits(cfg, Ab, Bb, None)
    else:
        D = gemm_bits(cfg, Ab, Bb, _c_bits(ins, C, shape), scales=scales)
    D = _values.from_bits(ins.dtype, D)
    return D if alpha is None else D * alpha


def _global_scale(q):
    if q is None:
        return None
    ga, gb = q[0].global_scale, q[1].global_scale
    if ga is None and gb is None:
        return None
    one = jnp.float32(1)
    ga = one if ga is None else ga.astype(jnp.float32)
    gb = one if gb is None else gb.astype(jnp.float32)
    return (ga * gb)[..., None, None] if jnp.ndim(ga * gb) else ga * gb


def _operand_values(cfg: Config, A, B, q):
    """The float32 values the instruction multiplies (for the straight-through tangent)."""
    ins = cfg.ins
    if q is not None:
        va, vb = _quant.dequantize(q[0]), _quant.dequantize(q[1])
        if A is not None:  # a float input: the K it had before padding
            va = va[..., : A.shape[-1]]
        if B is not None:
            vb = vb[..., : B.shape[-2], :]
        return va, vb
    va = _operands.values(ins, ins.atype, _operands.to_bits(ins, ins.atype, A, "A"))
    vb = _operands.values(ins, ins.btype, _operands.to_bits(ins, ins.btype, B, "B"))
    return va, vb


def _quantize_operands(ins, A, B, quantize):
    """Block-scaled forms: Quantized A/B pass; float arrays are quantized along K."""
    out = []
    for name, x, axis in (("A", A, -1), ("B", B, -2)):
        if isinstance(x, _quant.Quantized):
            out.append((None, _quant.check_quantized(x, name, matrix=True)))
            continue
        x = _doubles.exact_float32(x, name)  # the quantizers' rule: doubles exact in float32
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(
                f"{name}: expected a jaxmma.quant.Quantized operand or a float array to "
                f"quantize for {ins.text}, got {x.dtype}"
            )
        fmt = ins.atype if name == "A" else ins.btype
        x_q = jax.lax.stop_gradient(x)  # the tangent reaches x through the straight-through rule
        k = x.shape[axis]
        x_q = _pad_axis(x_q, axis, -(-k // ins.k) * ins.k)  # ragged K: +0 blocks, as a kernel
        if quantize is not None:
            qx = quantize(x_q, axis=axis)
        elif ins.stype == "ue4m3":
            qx = _quant.quantize_nvfp4(x_q, axis=axis, block=_scaling.block_size(ins))
        else:
            qx = _quant.quantize_mx(x_q, fmt, axis=axis, block=_scaling.block_size(ins))
        out.append((x, _quant.computed_once(_quant.check_quantized(qx, name, matrix=True))))
    (A, qa), (B, qb) = out
    return A, B, (qa, qb)


#: the emulation itself, compiled once per configuration and shapes; called eagerly (and
#: by the derivative rules under an eager ``jax.grad``) it reuses that compilation
_forward_jit = _xla.jit(lambda cfg, *args: _forward(cfg, *args), static_argnums=0)


def _grad_gemm(grad_ins: Instruction | None):
    """The gradient GEMM ``(x, y) -> x @ y`` on ``grad_ins`` (None: the exact product).

    The forward's operands enter as the float32 values of their converted elements: where
    the gradient form reads the forward's element format on that side (the e4m3 w of an
    ``.e5m2.e4m3`` dgrad), converting them again is exact, so the forward's bits are
    what the gradient GEMM multiplies; another format rounds them again."""
    if grad_ins is None:
        return None
    return functools.partial(matmul, instruction=grad_ins)


def _gemm_values(cfg: Config, A, B, C, q):
    """matmul after its arguments were checked."""
    fwd = functools.partial(_forward_jit, cfg)
    vals = functools.partial(_operand_values, cfg)
    if cfg.grad_ins is not None:
        dgrad, wgrad = _grad_gemm(cfg.dgrad_ins), _grad_gemm(cfg.wgrad_ins)
        named = (("dgrad_instruction", cfg.dgrad_ins), ("wgrad_instruction", cfg.wgrad_ins))
        given = [n for n, i in named if i is not None]
        option = "/".join(given) + " (or grad_instruction)"
        return _ste.with_gemm_gradients(fwd, vals, dgrad, wgrad, A, B, C, q, option=option)
    return _ste.straight_through(fwd, vals, A, B, C, q)


def matmul(
    A: ArrayLike | Quantized,
    B: ArrayLike | Quantized,
    C: ArrayLike | None = None,
    *,
    instruction: str | Instruction | None = None,
    options: GemmOptions | None = None,
    arch: str | None = None,
    promote_every: int | None = None,
    quantize: Callable[..., Quantized] | None = None,
    grad_instruction: str | Instruction | None = None,
    dgrad_instruction: str | Instruction | None = None,
    wgrad_instruction: str | Instruction | None = None,
    executor: str = "auto",
    check: bool | None = None,
    split_k: int | None = None,
    k_tile: int | None = None,
    split_rule: str | None = None,
    split_reduce: str | tuple[Any, Any] | None = None,
    input_rounding: str | None = None,
    rounding: str | None = None,
    key: ArrayLike | None = None,
    epilogue: str | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    out_dtype: DTypeLike | None = None,
    convert_inputs: str | None = None,
    scale_a: ArrayLike | None = None,
    scale_b: ArrayLike | None = None,
) -> jax.Array:
    """``D = A @ B + C`` computed as a GEMM kernel built on one PTX instruction computes it.

    Every ``m x n`` tile of D starts from C and chains ``instruction`` over the k-steps in
    increasing k, with the instruction's exact arithmetic on the chosen architecture.

    Args:
      A: ``[..., M, K]``; B: ``[..., K, N]``; C: ``[..., M, N]`` or None (+0). Batch
        dimensions broadcast as in ``jnp.matmul``; M, N, K of any size (K is padded with
        +0 to a multiple of the instruction's k). Element dtypes (``jnp.bfloat16``,
        ``jnp.float8_e4m3fn``, ``jnp.int8``, ...) are used as they are; other float
        dtypes are rounded to nearest into the element type (saturating for fp8/fp6/fp4
        and integers: ``cvt.rn.satfinite``), float64 once from the double, x64 on or
        off (docs/dtypes.md); unsigned integers are raw bits, at least as wide as the
        element's container. C is in the
        accumulator type (f32 inputs are rounded to an f16 accumulator).
        Sparse (``mma.sp``) forms: A is the dense matrix with the form's structure (2 of
        every 4, 1 of 2 for ``.tf32``), checked (ValueError for concrete A; a traced A
        see ``check``).
        Block-scaled forms: A and B are :class:`jaxmma.quant.Quantized` (quantized along
        K with the form's block: ``quantize_mx(X, fmt, block=...)``, ``quantize_nvfp4``),
        or float arrays quantized here with ``quantize`` (default: NVFP4 for ``ue4m3``
        scales, MX with floor scales otherwise). Per-tensor (NVFP4 global) scales
        multiply the accumulator in f32 afterwards, and C is then added (one f32 add),
        as a kernel's epilogue does.
      instruction: PTX text of an ``mma`` / ``mma.sp`` / block-scaled ``mma`` /
        ``wmma.mma`` / ``wgmma.mma_async`` / ``tcgen05.mma`` form, or a
        :class:`jaxmma.Instruction` (required unless ``options`` names it).
      options: a :class:`jaxmma.GemmOptions` holding the configuration keywords below
        (all but ``rounding``, the alias, and the arrays ``key``, ``scale_a``,
        ``scale_b``); the same bits as those keywords. A keyword given beside it must
        agree with its field (``ValueError`` naming both); one left at its default takes
        the field's value.
      arch: the architecture whose arithmetic is emulated. Omitted with instruction text,
        the newest architecture that runs the form is emulated and a
        :class:`jaxmma.DefaultArchWarning` names it (once per form); an
        :class:`Instruction` brings its own.
      promote_every: P k-steps between promotions of the instruction accumulator into an
        f32 total (f32 accumulators only); None: no promotion. P at least the number
        of k-steps is one group of all of them (the same bits, at no cost).
      quantize: for block-scaled forms with float A/B, ``quantize(x, axis=...)`` ->
        ``Quantized`` (e.g. ``functools.partial(jaxmma.quant.quantize_mx, fmt="e2m1",
        block=32, scale_rounding="ceil")``).
      grad_instruction: compute the two gradient GEMMs of the backward pass through this
        dense instruction (e.g. an ``.e5m2`` form, as fp8 training recipes do) instead of
        exactly. Text is parsed for the forward's ``arch``; an :class:`Instruction` keeps
        its own. Reverse mode only (``jax.grad``, ``grad`` of ``grad``; forward mode over
        the backward, as ``jax.hessian`` does, is refused by JAX's custom_vjp).
      dgrad_instruction: the instruction of ``dA = G @ B^T`` alone (default
        ``grad_instruction``; None for both: exact), e.g. ``.e5m2.e4m3`` with an e4m3
        forward: B enters as the forward's e4m3 bits, not rounded again.
      wgrad_instruction: the same for ``dB = A^T @ G`` (e.g. ``.e4m3.e5m2``).
      executor: ``"auto"`` (default), ``"native"`` or ``"emulate"``. Where the GPU at
        hand runs the form with the modelled numerics (sm_90 tensor cores, f32
        accumulators: ``wgmma`` bf16/f16/tf32/fp8, ``mma.sync`` m16n8k16 bf16/f16,
        m16n8k8 tf32 and m16n8k32 fp8), ``"auto"``
        runs it on the device's own matrix instructions, with the emulation's bits;
        ``"native"`` insists (``ValueError`` naming the reason where it cannot);
        ``"emulate"`` never does (docs/gemm.md, "The native executor").
      check: sparse forms only. A concrete A is always checked. A traced A (under
        ``jit``/``vmap``): ``True`` checks it when the compiled program runs (a
        ``jax.errors.JaxRuntimeError`` whose text ends with our ``ValueError`` message,
        naming the tile, row and chunk); ``None``/``False``: not checked, and every row of
        D whose row of A lacks the structure is poison: NaN (``0x7FFFFFFF`` /
        ``0x7FFF``) for float accumulators, ``-2**31`` for ``.s32`` (docs/gemm.md).
      split_k, k_tile, split_rule, split_reduce: split-K as library kernels run it: K cut
        into ``split_k`` slices (``split_rule`` ``"cublas"``, ``"cutlass"`` or ``"xla"``;
        ``k_tile``: the kernel's K tile, default the instruction's k), each chained from
        +0, the f32 partials added in ``split_reduce`` order (``"sequential"``,
        ``"halving"`` or a pairing tree). docs/gemm.md says which rule models which call.
      input_rounding: ``"rn"``, ``"rna"``, ``"rz"`` or ``"stochastic"``: float inputs
        rounded to the element type so (``.tf32`` from float32 too: ``"rn"`` as cuBLAS
        does); None: as above (to nearest even).
      rounding: the same option under its short name (give one of the two).
      key: a ``jax.random`` key, required by ``"stochastic"`` (and only there): A's
        random bits are ``jax.random.bits(jax.random.split(key)[0], A.shape, uint32)``,
        B's from ``split(key)[1]``, rounded as ``jaxmma.formats.encode`` documents.
      epilogue: None (C starts the chain), ``"f32"`` (``out(fma(alpha, acc, beta * C))``
        in f32, one rounding to the output) or ``"rounded"``
        (``out(f32(out(alpha * acc)) + beta * C)``: rounded twice); ``alpha``, ``beta``:
        Python floats (f32), with an epilogue only.
      out_dtype: ``jnp.float32``, ``jnp.bfloat16`` or ``jnp.float16``: the result type,
        one round to nearest even at the end (None: the accumulator's).
      convert_inputs: ``"f16"``: A and B are fp8 arrays (``float8_e4m3fn`` /
        ``float8_e5m2``) converted exactly to f16 for an f16 ``instruction``: the path
        Triton takes for fp8 dots with ``mma.sync`` on sm_90 (docs/xla_gpu.md).
      scale_a, scale_b: float32 fp8 scales beside A and B; their shapes name the recipe:
        per-tensor ``()``, row-wise ``[M, 1]`` / ``[1, N]``, DeepSeek-V3 block
        ``[M, ceil(K/128)]`` / ``[ceil(K/128), ceil(N/128)]`` (docs/gemm.md).

    Returns:
      D ``[..., M, N]`` in the accumulator type (float32, float16, int32, float64).

    Derivatives: straight-through. The tangent is that of the exact product of the values
    the instruction reads, ``dA @ B + A @ dB + dC`` in float32.

    Raises:
      ValueError: bad shapes, an instruction without a matrix product, a bad
        ``promote_every``, an ``arch`` that cannot run the form, a non-structured sparse A,
        ``check`` on a dense form, a keyword that differs from ``options``.
      TypeError: an operand dtype the instruction cannot take; ``check`` not a bool;
        neither ``instruction`` nor ``options``; ``options`` not a GemmOptions.

    Example:
      >>> import jax.numpy as jnp, jaxmma
      >>> A = jnp.ones((40, 100), jnp.bfloat16); B = jnp.ones((100, 24), jnp.bfloat16)
      >>> D = jaxmma.matmul(A, B, instruction="mma.sync.aligned.m16n8k16.row.col"
      ...                   ".f32.bf16.bf16.f32", arch="sm_90")
      >>> D.shape, D.dtype, float(D[0, 0])
      ((40, 24), dtype('float32'), 100.0)
    """
    given = dict(
        instruction=instruction, arch=arch, promote_every=promote_every, executor=executor,
        grad_instruction=grad_instruction, dgrad_instruction=dgrad_instruction,
        wgrad_instruction=wgrad_instruction, split_k=split_k, k_tile=k_tile,
        split_rule=split_rule, split_reduce=split_reduce, input_rounding=input_rounding,
        epilogue=epilogue, alpha=alpha, beta=beta, out_dtype=out_dtype,
        convert_inputs=convert_inputs, quantize=quantize, check=check,
    )  # fmt: skip
    fields = merge(options, given, rounding)
    cfg, opts = validate(**fields)
    ins = cfg.ins
    warn_default_arch(fields["instruction"], fields["arch"], ins)
    quantize, check, convert_inputs = fields["quantize"], fields["check"], fields["convert_inputs"]
    for name, x in (("A", A), ("B", B)):
        _values.check_numeric(x, name)
    for name, x in (("C", C), ("scale_a", scale_a), ("scale_b", scale_b)):
        _values.check_array_like(x, name)
    _kernel.check_key(opts, key)
    if not ins.stype and convert_inputs is None:  # doubles: rounded once, in the GEMM's mode
        mode = None if opts is None else opts.input_rounding
        A = _operands.float64_operand(ins, ins.atype, A, "A", mode)
        B = _operands.float64_operand(ins, ins.btype, B, "B", mode)
        if C is not None and (opts is None or opts.epilogue is None):  # else: the epilogue's
            C = _operands.float64_operand(ins, ins.ctype, C, "C")
    C = _broadcast_c(C, A, B)
    if opts is not None or scale_a is not None or scale_b is not None:
        return _kernel.matmul(
            cfg, opts, A, B, C, scale_a, scale_b, chain=gemm_bits,
            check_shapes=_check_shapes, key=key,
        )  # fmt: skip
    q = None
    if ins.stype:
        A, B, q = _quantize_operands(ins, A, B, quantize)
        _check_shapes(ins, q[0].elements, q[1].elements, None if C is None else jnp.asarray(C))
    else:
        A, B = jnp.asarray(A), jnp.asarray(B)
        _check_shapes(ins, A, B, None if C is None else jnp.asarray(C))
        if ins.sparse and (check or not _errors.is_traced(A)):
            _check_structure(ins, A)
    return _gemm_values(cfg, A, B, C, q)


def _check_structure(ins, A):
    """ValueError when a sparse A lacks the form's structure: at once for a concrete A, when
    the program runs for a traced one (``check=True``; inside the jitted GEMM A is traced
    and its invalid rows are poisoned instead)."""
    bits = _operands.to_bits(ins, ins.atype, A, "A")
    M, K = bits.shape[-2:]
    bits = _pad_axis(_pad_axis(bits, -2, -(-M // ins.m) * ins.m), -1, -(-K // ins.k) * ins.k)
    lead = bits.shape[:-2]
    tiles = bits.reshape(lead + (bits.shape[-2] // ins.m, ins.m, bits.shape[-1] // ins.k, ins.k))
    _sparse.validate(ins, jnp.swapaxes(tiles, -2, -3))  # [..., M / m, K / k, m, k]


def _host_double(ins, x, name: str, fields):
    """dot_general's operand: host doubles as a NumPy float64 array (float32 where the
    quantizers take them), checked by the rule matmul applies; others as jax arrays."""
    if ins.stype:
        x = _doubles.exact_float32(x, name)
    if not _doubles.is_host_double(x):
        return jnp.asarray(x)
    fmt = ins.atype if name == "lhs" else ins.btype
    mode = fields["input_rounding"] or "rn"
    if fmt not in ("b1", "s32", "f64") and mode in _doubles.ROUNDINGS:
        sat = fmt in _operands.SATURATE
        _doubles.prepare(x, _formats.FORMATS[fmt], mode, sat, name)  # its errors
    return np.asarray(x, np.float64)


def dot_general(
    lhs: ArrayLike,
    rhs: ArrayLike,
    dimension_numbers: tuple[tuple[Any, Any], tuple[Any, Any]],
    precision: Any = None,
    preferred_element_type: DTypeLike | None = None,
    *,
    instruction: str | Instruction | None = None,
    options: GemmOptions | None = None,
    arch: str | None = None,
    promote_every: int | None = None,
    out_sharding: jax.sharding.Sharding | jax.sharding.PartitionSpec | None = None,
    **kwargs: Any,
) -> jax.Array:
    """``jax.lax.dot_general`` computed by :func:`matmul` on ``instruction``.

    Any contracting and batch dimensions; the output dims are (batch, lhs free, rhs
    free), as ``lax.dot_general`` orders them. The contracting dimensions are flattened
    into K in the order ``dimension_numbers`` lists them. ``preferred_element_type``
    casts the accumulator result (round to nearest); ``precision`` is accepted and
    ignored (the instruction fixes the arithmetic). A drop-in for the ``dot_general=``
    argument of flax layers:
    ``functools.partial(jaxmma.dot_general, instruction=..., arch=...)``. Further keyword
    arguments (``quantize``, ``grad_instruction``, ``dgrad_instruction``,
    ``wgrad_instruction``, ``rounding``, ``key``, ``executor``, ``check``, the kernel
    options) go to :func:`matmul`; ``options=jaxmma.GemmOptions(...)`` holds them all
    (with ``instruction``, ``arch`` and ``promote_every``), as for :func:`matmul`.

    Example:
      >>> import functools, jax, jax.numpy as jnp, jaxmma
      >>> dg = functools.partial(jaxmma.dot_general, instruction="mma.sync.aligned."
      ...                        "m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
      >>> x = jnp.ones((2, 5, 32)); w = jnp.ones((32, 3))
      >>> dg(x, w, (((2,), (0,)), ((), ()))).shape
      (2, 5, 3)
    """
    del precision
    if out_sharding is not None and not isinstance(
        out_sharding, jax.sharding.Sharding | jax.sharding.PartitionSpec
    ):
        raise TypeError(
            "out_sharding: expected None, a jax.sharding.Sharding or a PartitionSpec, got "
            f"{out_sharding!r}"[:300]
        )
    if preferred_element_type is not None:
        try:
            preferred_element_type = jnp.dtype(preferred_element_type)
        except TypeError:
            raise TypeError(
                "preferred_element_type: expected None or a dtype (jnp.float32, ...), got "
                f"{_shown(preferred_element_type)}"
            ) from None
    _values.check_numeric(lhs, "lhs")
    _values.check_numeric(rhs, "rhs")
    given = {k: kwargs.pop(k) for k in FIELDS if k in kwargs}
    given.update(instruction=instruction, arch=arch, promote_every=promote_every)
    fields = merge(options, given, kwargs.pop("rounding", None))
    ins = resolve(fields["instruction"], fields["arch"])
    # doubles stay doubles on the host (matmul rounds them once, in its mode); their
    # errors name lhs and rhs
    lhs, rhs = (_host_double(ins, x, n, fields) for x, n in ((lhs, "lhs"), (rhs, "rhs")))
    (lc, rc), (lb, rb) = _dimension_numbers(dimension_numbers, lhs, rhs)
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    batch = tuple(lhs.shape[d] for d in lb)
    size = lambda x, dims: math.prod(x.shape[d] for d in dims)  # noqa: E731
    xp = lambda x: np if isinstance(x, np.ndarray) else jnp  # noqa: E731
    L = xp(lhs).transpose(lhs, lb + lf + lc).reshape(batch + (size(lhs, lf), size(lhs, lc)))
    R = xp(rhs).transpose(rhs, rb + rc + rf).reshape(batch + (size(rhs, rc), size(rhs, rf)))
    D = matmul(L, R, **fields, **kwargs)
    D = D.reshape(batch + tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf))
    if preferred_element_type is not None:
        D = D.astype(preferred_element_type)
    if out_sharding is not None:
        D = jax.lax.with_sharding_constraint(D, out_sharding)
    return D


def _is_dim(d) -> bool:
    """A dimension index: an int (NumPy's too), never a bool, float or string."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))


def _dimension_numbers(dn, lhs, rhs):
    try:
        (lc, rc), (lb, rb) = dn
        lc, rc, lb, rb = (tuple(x) for x in (lc, rc, lb, rb))
        if not all(_is_dim(d) for d in lc + rc + lb + rb):
            raise TypeError
        lc, rc, lb, rb = (tuple(int(d) for d in x) for x in (lc, rc, lb, rb))
    except (TypeError, ValueError):
        raise ValueError(
            "dimension_numbers: expected ((lhs_contracting, rhs_contracting), (lhs_batch, "
            f"rhs_batch)) of int dimension indices, got {_shown(dn)}"
        ) from None
    for name, dims, x in (("lhs", lc + lb, lhs), ("rhs", rc + rb, rhs)):
        if any(d < 0 or d >= x.ndim for d in dims) or len(set(dims)) != len(dims):
            raise ValueError(
                f"dimension_numbers: {name} dimensions {dims} must be distinct and in "
                f"range for rank {x.ndim}"
            )
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ValueError(
            f"dimension_numbers: contracting {lc} / {rc} and batch {lb} / {rb} must pair up"
        )
    for kind, ld, rd in (("contracting", lc, rc), ("batch", lb, rb)):
        for i, j in zip(ld, rd, strict=True):
            if lhs.shape[i] != rhs.shape[j]:
                raise ValueError(
                    f"dimension_numbers: {kind} dimension {i} of lhs {tuple(lhs.shape)} and "
                    f"{j} of rhs {tuple(rhs.shape)} differ in size"
                )
    return (list(lc), list(rc)), (list(lb), list(rb))
