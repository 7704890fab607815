"""Operand preparation, the GEMM pipeline's stage before the executor.

Doubles rounded once to the element types, C broadcast as ``jnp`` broadcasts a bias, K
padded to ``pad_k`` (:func:`inputs`, in ``matmul``); then, in :mod:`._pipeline`, shapes
checked (with the argument named: :func:`checked_operands`), block-scaled operands
quantized along K, sparse A checked for its structure, fp8 inputs of ``convert_inputs``
and an epilogue's C checked and rounded on the host; in the program, the bits the
instruction reads (:func:`operands`: float inputs converted to the element type once,
rounded as ``input_rounding`` says, with the random bits of stochastic rounding, for
every configuration alike) and the float32 values of the same bits (:func:`operand_values`,
for the straight-through tangent). Nothing here chooses an executor or computes a sum.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import arith, util
from ..bits import FORMATS, ROUNDINGS, encode, exact_float32, is_host_double, prepare, to_container
from ..operands import (
    SATURATE,
    Quantized,
    as_operands,
    block_size,
    check_quantized,
    computed_once,
    dequantize,
    element_dtype,
    float64_operand,
    quantize_mx,
    quantize_nvfp4,
    validate_sparse,
)
from ..operands import operand_bits as _operand_bits
from ..operands import operand_values as _operand_values
from . import _config, _epilogue
from ._config import Config

F32 = jnp.float32
FP8 = (jnp.dtype(jnp.float8_e4m3fn), jnp.dtype(jnp.float8_e5m2))  # convert_inputs' dtypes
_pad_axis = util.pad_axis


def inputs(ins, opts, A, B, C, *, convert_inputs=None):
    """matmul's A, B and C as every path of the pipeline takes them: doubles rounded once
    to the element types (in ``input_rounding``'s mode; C only where it starts the chain,
    an epilogue rounds its own), C broadcast to ``[M, N]`` (:func:`broadcast_c`), K padded
    to ``pad_k``. Block-scaled forms and ``convert_inputs`` keep their doubles here: the
    quantizers and the conversion read them later."""
    if not ins.stype and convert_inputs is None:
        mode = None if opts is None else opts.input_rounding
        A = float64_operand(ins, ins.atype, A, "A", mode)
        B = float64_operand(ins, ins.btype, B, "B", mode)
        if C is not None and (opts is None or opts.epilogue is None):
            C = float64_operand(ins, ins.ctype, C, "C")
    C = broadcast_c(C, A, B)
    if opts is not None and opts.pad_k is not None:
        A, B = pad_k(A, B, opts.pad_k)
    return A, B, C


def check_convert_inputs(opts, A, B) -> None:
    """``convert_inputs='f16'`` takes fp8 arrays: a TypeError naming the operand
    otherwise (the dtypes given, before JAX converts doubles)."""
    if opts is None or opts.convert_inputs is None:
        return
    for name, x in (("A", A), ("B", B)):
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        if dtype not in FP8:
            raise TypeError(
                f"{name}: convert_inputs='f16' takes float8_e4m3fn or float8_e5m2 "
                f"arrays, got {dtype}"
            )


def epilogue_c(ins, opts, kind, C):
    """An epilogue's C of host doubles, before the program: rounded once into the output
    type (:func:`._epilogue.host_c`), the accumulator's where none is asked for (f32
    after a split or the block recipe). C unchanged without an epilogue."""
    if C is None or opts is None or opts.epilogue is None:
        return C
    acc = "f32" if kind == "block" or opts.splits else ins.dtype
    return _epilogue.host_c(C, opts.out_dtype or acc)


def pad_k(A, B, pad_k: int):
    """A ``[..., M, K]`` and B ``[..., K, N]`` with +0 elements appended to K up to
    ``pad_k`` (the ``pad_k`` option); a ValueError naming it where K is longer."""
    A, B = jnp.asarray(A), jnp.asarray(B)
    K = A.shape[-1] if A.ndim else 0
    if A.ndim < 2 or B.ndim < 2 or B.shape[-2] != K:
        return A, B  # the shape check that follows names the mismatch
    if pad_k < K:
        raise ValueError(f"pad_k: K = {K} is longer than pad_k = {pad_k}")
    if pad_k == K:
        return A, B
    A = jnp.pad(A, [(0, 0)] * (A.ndim - 1) + [(0, pad_k - K)])
    B = jnp.pad(B, [(0, 0)] * (B.ndim - 2) + [(0, pad_k - K), (0, 0)])
    return A, B


def checked_operands(ins, A, B, C, *, quantize=None, check=None):
    """The plain path's operands, checked: ``(A, B, q)``. Block-scaled forms quantize
    float A and B along K (:func:`quantize_operands`; ``q`` the quantized pair); other
    forms take A and B as jax arrays (``q`` None), and a sparse A is checked for its
    structure when concrete, or when traced with ``check`` (:func:`check_structure`)."""
    c = None if C is None else jnp.asarray(C)
    if ins.stype:
        A, B, q = quantize_operands(ins, A, B, quantize)
        check_shapes(ins, q[0].elements, q[1].elements, c)
        return A, B, q
    A, B = jnp.asarray(A), jnp.asarray(B)
    check_shapes(ins, A, B, c)
    if ins.sparse and (check or not util.is_traced(A)):
        check_structure(ins, A)
    return A, B, None


def check_shapes(ins, A, B, C):
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


def broadcast_c(C, A, B):
    """A C of fewer dimensions that broadcasts to ``[M, N]`` (a bias ``[N]`` or ``[1, N]``
    as ``F.linear`` adds it, a column ``[M, 1]``) broadcast to it, before any derivative
    rule: the cotangent of C then sums back to C's shape. Anything else is returned as
    given (``check_shapes`` names what is wrong). NumPy arrays stay NumPy (a double keeps
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


def c_bits(ins, C):
    """C's bits in the instruction's C format (None: None, +0 for the executor)."""
    return None if C is None else _operand_bits(ins, ins.ctype, C, "C")


def operands(cfg: Config, opts, A, B, q, key=None):
    """The bits the instruction reads: ``(A bits, B bits, scales)``; for block-scaled
    forms (``q``: the quantized A and B) the elements' bits and ``(SA, SB)``, else float
    inputs converted once (:func:`rounded_bits`, as ``opts`` says; None: the element
    dtype's own rule) and ``scales`` None."""
    ins = cfg.ins
    if q is not None:  # block-scaled: the quantized operands carry the bits
        Ab, Bb, SA, SB = as_operands(ins, q[0], q[1])
        return Ab, Bb, (SA, SB)
    Ab, Bb = rounded_bits(ins, opts, A, B, key)
    return Ab, Bb, None


def global_scale(q):
    """NVFP4's per-tensor scales of the quantized A and B multiplied, the float32 bits of
    one IEEE multiply (rounded to nearest even, subnormals kept, as on a GPU; XLA:CPU's
    own float multiply flushes them), or None."""
    if q is None:
        return None
    ga, gb = q[0].global_scale, q[1].global_scale
    if ga is None and gb is None:
        return None
    one = jnp.float32(1)
    ga = one if ga is None else ga.astype(jnp.float32)
    gb = one if gb is None else gb.astype(jnp.float32)
    bits = [jax.lax.bitcast_convert_type(g, jnp.uint32) for g in (ga, gb)]
    alpha = arith.fmul_f32(*bits)
    return alpha[..., None, None] if jnp.ndim(alpha) else alpha


def operand_values(cfg: Config, opts, A, B, q, key=None):
    """The float32 values the instruction multiplies (for the straight-through tangent):
    the dequantized ``q``, or the values of :func:`operands`' bits."""
    ins = cfg.ins
    if q is not None:
        va, vb = dequantize(q[0]), dequantize(q[1])
        if A is not None:  # a float input: the K it had before padding
            va = va[..., : A.shape[-1]]
        if B is not None:
            vb = vb[..., : B.shape[-2], :]
        return va, vb
    Ab, Bb = rounded_bits(ins, opts, A, B, key)
    return _operand_values(ins, ins.atype, Ab), _operand_values(ins, ins.btype, Bb)


def quantize_operands(ins, A, B, quantize):
    """Block-scaled forms: Quantized A/B pass; float arrays are quantized along K."""
    given = []
    for name, x in (("A", A), ("B", B)):
        if isinstance(x, Quantized):
            given.append(check_quantized(x, name, matrix=True))
            continue
        x = jnp.asarray(exact_float32(x, name))  # the quantizers' rule: doubles exact in f32
        if x.dtype not in (jnp.float32, jnp.float16, jnp.bfloat16):
            raise TypeError(
                f"{name}: expected a jaxmma.quant.Quantized operand or a float32, float16 "
                f"or bfloat16 array to quantize for {ins.text}, got {x.dtype}"
            )
        given.append(x)
    # the shapes as given, before a ragged K is padded: A's K must be B's
    check_shapes(ins, *(x.elements if isinstance(x, Quantized) else x for x in given), None)
    out = []
    for name, x, axis in (("A", given[0], -1), ("B", given[1], -2)):
        if isinstance(x, Quantized):
            out.append((None, x))
            continue
        fmt = ins.atype if name == "A" else ins.btype
        x_q = jax.lax.stop_gradient(x)  # the tangent reaches x through the straight-through rule
        k = x.shape[axis]
        x_q = _pad_axis(x_q, axis, -(-k // ins.k) * ins.k)  # ragged K: +0 blocks, as a kernel
        if quantize is not None:
            qx = quantize(x_q, axis=axis)
        elif ins.stype == "ue4m3":
            qx = quantize_nvfp4(x_q, axis=axis, block=block_size(ins))
        else:
            qx = quantize_mx(x_q, fmt, axis=axis, block=block_size(ins))
        out.append((x, computed_once(check_quantized(qx, name, matrix=True))))
    (A, qa), (B, qb) = out
    return A, B, (qa, qb)


def check_structure(ins, A):
    """ValueError when a sparse A lacks the form's structure: at once for a concrete A, when
    the program runs for a traced one (``check=True``; inside the jitted GEMM A is traced
    and its invalid rows are poisoned instead)."""
    bits = _operand_bits(ins, ins.atype, A, "A")
    M, K = bits.shape[-2:]
    bits = _pad_axis(_pad_axis(bits, -2, -(-M // ins.m) * ins.m), -1, -(-K // ins.k) * ins.k)
    lead = bits.shape[:-2]
    tiles = bits.reshape(lead + (bits.shape[-2] // ins.m, ins.m, bits.shape[-1] // ins.k, ins.k))
    validate_sparse(ins, jnp.swapaxes(tiles, -2, -3))  # [..., M / m, K / k, m, k]


def host_double(ins, x, name: str, fields) -> jax.Array | np.ndarray:
    """dot_general's operand: host doubles as a NumPy float64 array (float32 where the
    quantizers take them), checked by the rule matmul applies; others as jax arrays."""
    if ins.stype:
        x = exact_float32(x, name)
    if not is_host_double(x):
        return jnp.asarray(x)
    fmt = ins.atype if name == "lhs" else ins.btype
    mode = fields["input_rounding"] or "rn"
    if fmt not in ("b1", "s32", "f64") and mode in ROUNDINGS:
        sat = fmt in SATURATE
        prepare(x, FORMATS[fmt], mode, sat, name)  # its errors
    return np.asarray(x, np.float64)


def random_bits(key, which: int, shape):
    """uint32 random bits of operand ``which`` (0: A, 1: B) for stochastic rounding:
    ``jax.random.bits(jax.random.split(key)[which], shape, uint32)``."""
    return jax.random.bits(jax.random.split(key)[which], shape, jnp.uint32)


def rounded_operand_bits(ins, fmt: str, x, name: str, rounding, rbits=None):
    """:func:`jaxmma.operands.operand_bits`, with float inputs rounded to ``fmt`` by
    ``rounding`` (``.tf32`` from float32 included; inputs already in an element dtype
    other than float32 are taken as they are)."""
    x = jnp.asarray(x)
    if rounding is None or not jnp.issubdtype(x.dtype, jnp.floating):
        return _operand_bits(ins, fmt, x, name)
    want = element_dtype(fmt)
    if fmt != "tf32" and want is not None and x.dtype == jnp.dtype(want):
        return _operand_bits(ins, fmt, x, name)
    if x.dtype.itemsize < 2:
        x = x.astype(F32)
    rb = None if rounding != "stochastic" else jnp.broadcast_to(rbits, x.shape)
    sat = fmt in SATURATE
    bits = encode(fmt, x, rounding=rounding, saturate=sat, random_bits=rb)
    return to_container(bits, fmt) if ins.kind == "f8f6f4" else bits


def rounded_bits(ins, opts, A, B, key):
    """The bits of A and B that the instruction reads, float inputs rounded to their
    element types as ``opts.input_rounding`` says (``opts`` None: as the operands' rule
    does; ``"stochastic"``: with ``key``'s random bits, :func:`random_pair`); the one
    conversion of every dense GEMM."""
    rounding = None if opts is None else opts.input_rounding
    ra, rb = random_pair(rounding, key, A, B)
    Ab = rounded_operand_bits(ins, ins.atype, A, "A", rounding, ra)
    Bb = rounded_operand_bits(ins, ins.btype, B, "B", rounding, rb)
    return Ab, Bb


def random_pair(rounding, key, A, B):
    if rounding != "stochastic":
        return None, None
    return random_bits(key, 0, jnp.shape(A)), random_bits(key, 1, jnp.shape(B))


def check_key(opts, key):
    """``key`` for ``input_rounding='stochastic'`` (a jax.random key), None otherwise;
    whether one belongs is :func:`._config.refuse_key`'s rule."""
    _config.refuse_key(opts, key)
    if key is None:
        return None
    key = jnp.asarray(key)
    if not (jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.dtype == jnp.uint32):
        raise TypeError(f"key: expected a jax.random key, got dtype {key.dtype}")
    if key.dtype == jnp.uint32:
        key = jax.random.wrap_key_data(key)
    if key.shape != ():
        raise ValueError(f"key: expected one key (shape ()), got shape {key.shape}")
    return key
