"""The GEMM layer's public faces, ``jaxmma.matmul`` and ``jaxmma.dot_general``: the
stages of the pipeline (``jaxmma/gemm/__init__.py``) wired in order.

``matmul`` validates its options (:mod:`._config`), takes its arrays in
(:func:`._prepare.inputs`: doubles, C broadcast, ``pad_k``) and hands them to the one
pipeline, :func:`._pipeline.matmul`, whatever the options: the plan, the forward on raw
bits (prepare, execute on the executor :func:`._executors.choose` picks, finish) and its
derivative. ``dot_general`` reshapes its operands into one ``matmul``.

Derivatives (:mod:`jaxmma.util._ste`, wired in :mod:`._pipeline`): straight-through, the
tangent of the exact product of the values the instruction reads; ``matmul`` itself is
the gradient GEMM of ``grad_instruction``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .. import bits
from ..instructions import Instruction
from ..operands import Quantized
from ..spec import shown as _shown
from . import _pipeline, _prepare
from ._config import FIELDS, GemmOptions, merge, resolve, validate
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
    pad_k: int | None = None,
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
        or float32 / float16 / bfloat16 arrays (NumPy doubles that float32 holds
        exactly) quantized here with ``quantize`` (default: NVFP4 for ``ue4m3`` scales,
        MX with floor scales otherwise); other dtypes, element dtypes included, are a
        ``TypeError``. A's K must be B's before either is padded. Per-tensor (NVFP4
        global) scales multiply the accumulator with one IEEE f32 multiply afterwards
        (their product too; subnormals kept on every backend), and C is then added (one
        f32 add), as a kernel's epilogue does.
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
      pad_k: K extended with +0 elements (of A's columns and B's rows) to ``pad_k``
        before anything else: what XLA:GPU computes where it pads a dot's K to a
        multiple of its split (docs/xla_gpu.md); the zeros move where the slices and
        k-steps fall. At least K; a ``ValueError`` otherwise.
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
        convert_inputs=convert_inputs, quantize=quantize, check=check, pad_k=pad_k,
    )  # fmt: skip
    fields = merge(options, given, rounding)
    cfg, opts = validate(**fields)
    ins = cfg.ins
    warn_default_arch(fields["instruction"], fields["arch"], ins)
    quantize, check, convert_inputs = fields["quantize"], fields["check"], fields["convert_inputs"]
    for name, x in (("A", A), ("B", B)):
        bits.check_numeric(x, name)
    for name, v in (("C", C), ("scale_a", scale_a), ("scale_b", scale_b)):
        bits.check_array_like(v, name)
    key = _prepare.check_key(opts, key)
    A, B, C = _prepare.inputs(ins, opts, A, B, C, convert_inputs=convert_inputs)
    return _pipeline.matmul(
        cfg, opts, A, B, C, scale_a, scale_b, key=key, quantize=quantize, check=check,
        grad_matmul=matmul,
    )  # fmt: skip


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
    bits.check_numeric(lhs, "lhs")
    bits.check_numeric(rhs, "rhs")
    given = {k: kwargs.pop(k) for k in FIELDS if k in kwargs}
    given.update(instruction=instruction, arch=arch, promote_every=promote_every)
    fields = merge(options, given, kwargs.pop("rounding", None))
    ins = resolve(fields["instruction"], fields["arch"])
    # doubles stay doubles on the host (matmul rounds them once, in its mode); their
    # errors name lhs and rhs
    lhs, rhs = (_prepare.host_double(ins, x, n, fields) for x, n in ((lhs, "lhs"), (rhs, "rhs")))
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
