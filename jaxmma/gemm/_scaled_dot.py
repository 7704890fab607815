"""Drop-ins for ``jax.nn.scaled_matmul`` and ``jax.nn.scaled_dot_general``.

Same signatures, shapes and block-size inference as jax.nn (checked against jax 0.10.2),
computed as a GEMM chained on a block-scaled ``mma.sync`` form of ``sm_120a``
(``docs/scaled_dot.md``):

* ``float8_e4m3fn`` / ``float8_e5m2`` / ``float6_e3m2fn`` / ``float6_e2m3fn`` /
  ``float4_e2m1fn`` elements with ``float8_e8m0fnu`` scales, blocks of 32:
  ``kind::mxf8f6f4.block_scale.scale_vec::1X`` (m16n8k32, ue8m0);
* ``float4_e2m1fn`` elements with ``float8_e4m3fn`` scales, blocks of 16 (NVFP4):
  ``kind::mxf4nvf4.block_scale.scale_vec::4X`` (m16n8k64, ue4m3).

``instruction=`` names another block-scaled form (``kind::mxf4`` for MXFP4, say);
``arch=`` the architecture whose model runs it. The result is the bits of
:func:`jaxmma.matmul` on that instruction with :class:`jaxmma.quant.Quantized` operands
holding the same element and scale bits.

Derivatives: ``scaled_matmul`` has the straight-through tangent of the exact product of
the values the instruction reads (``docs/gemm.md``); ``scaled_dot_general`` has the GEMM
layer's straight-through rule (``grad="ste"``) or jax.nn's custom VJP, whose backward
GEMMs are quantized per ``configs[2]`` (``grad="configs"``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .. import util
from ..bits import decode, exact_float32
from ..instructions import Instruction
from ..operands import Quantized, block_size, quantize_mx, quantize_nvfp4
from . import _config, _gemm

F32 = jnp.float32
#: element dtypes (ml_dtypes names, as jax.nn takes them) -> formats of the instructions
ELEMENT_DTYPES = {
    "float8_e4m3fn": "e4m3",
    "float8_e5m2": "e5m2",
    "float6_e3m2fn": "e3m2",
    "float6_e2m3fn": "e2m3",
    "float4_e2m1fn": "e2m1",
}
#: scale dtypes -> scale formats (the sign bit of a float8_e4m3fn scale is ignored)
SCALE_DTYPES = {"float8_e8m0fnu": "ue8m0", "float8_e4m3fn": "ue4m3"}
#: the default form of each scale format, and the block (elements per scale) it runs
FORMS = {
    "ue8m0": "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.{a}.{b}.f32.ue8m0",
    "ue4m3": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.{a}.{b}.f32.ue4m3",
}
BLOCKS = {"ue8m0": 32, "ue4m3": 16}
OUT_DTYPES = ("float32", "bfloat16", "float16")
MODES = ("mxfp8", "nvfp4")
GRADS = ("ste", "configs")
HIGHEST = jax.lax.Precision.HIGHEST


# ---------------------------------------------------------------------------------------
# Formats and the instruction
def _dtype_name(x) -> str:
    return np.dtype(x.dtype).name


def _element_format(name: str, x, ins) -> str:
    """The element format of ``x``: its ml_dtypes type, or raw uint8 bits read in the
    format ``instruction`` names."""
    dt = _dtype_name(x)
    if dt in ELEMENT_DTYPES:
        return ELEMENT_DTYPES[dt]
    if dt == "uint8" and ins is not None:
        return ins.atype if name == "lhs" else ins.btype
    raw = "" if ins is not None else " (uint8 raw bits need instruction= to name their format)"
    raise TypeError(
        f"{name}: no block-scaled instruction takes {dt} elements; expected one of "
        f"{', '.join(ELEMENT_DTYPES)}{raw}"
    )


def _scale_format(name: str, s, ins) -> str:
    dt = _dtype_name(s)
    if dt in SCALE_DTYPES:
        return SCALE_DTYPES[dt]
    if dt == "uint8" and ins is not None:
        return ins.stype
    raise TypeError(
        f"{name}: no block-scaled instruction takes {dt} scales; expected float8_e8m0fnu "
        "(MX: ue8m0) or float8_e4m3fn (NVFP4: ue4m3)"
    )


def _pick(afmt, bfmt, stype, block, *, instruction, arch, names, block_name=None):
    """The block-scaled instruction for these formats and block, or a clear error naming
    ``names`` (the arguments that give A's and B's formats, then their scale types) and
    ``block_name`` (what gives the block size; default: the two scale arguments)."""
    sa, sb = stype
    if sa != sb:
        raise TypeError(
            f"{names[2]}, {names[3]}: mixed scale types {sa} and {sb}; a block-scaled "
            "instruction takes one scale type for both operands (ue8m0 or ue4m3)"
        )
    stype = sa
    if instruction is None:
        if stype == "ue4m3" and (afmt, bfmt) != ("e2m1", "e2m1"):
            bad = names[0] if afmt != "e2m1" else names[1]
            got = afmt if afmt != "e2m1" else bfmt
            raise TypeError(
                f"{bad}: float8_e4m3fn (ue4m3) scales are NVFP4's and take float4_e2m1fn "
                f"elements only (kind::mxf4nvf4), got {got}"
            )
        ins = _config.resolve(FORMS[stype].format(a=afmt, b=bfmt), arch)
    else:
        ins = _config.resolve(instruction, arch)
        if not ins.stype or ins.sparse:
            raise ValueError(
                f"instruction: expected a dense block-scaled mma form (kind::mxf8f6f4, "
                f"kind::mxf4, kind::mxf4nvf4), got {ins.text!r}"
            )
        for what, got, want in (
            (names[0], afmt, ins.atype),
            (names[1], bfmt, ins.btype),
            (f"{names[2]}, {names[3]}", stype, ins.stype),
        ):
            if got != want:
                raise TypeError(f"{what}: {ins.text} takes .{want}, got .{got}")
    want = block_size(ins)
    if block != want:
        allowed = want if instruction is not None else f"{BLOCKS[stype]} for {stype} scales"
        what = block_name or f"{names[2]}, {names[3]}: block size"
        raise ValueError(
            f"{what}: {block} elements per scale (K / number of scales) has no "
            f"block-scaled instruction; {ins.text} takes blocks of {want} (allowed: {allowed})"
        )
    return ins


def _out_dtype(preferred_element_type, name: str):
    try:
        dt = np.dtype(preferred_element_type)
    except TypeError:
        dt = None
    if dt is None or dt.name not in OUT_DTYPES:
        raise TypeError(
            f"preferred_element_type: expected one of {', '.join(OUT_DTYPES)} for {name}, "
            f"got {preferred_element_type!r}"
        )
    return dt


# ---------------------------------------------------------------------------------------
# scaled_matmul
def _check_matmul_shapes(lhs, rhs, lhs_scales, rhs_scales):
    """jax.nn.scaled_matmul's shape rules (ValueError, as it raises them), plus the block
    size that it infers but does not check."""
    named = (("lhs", lhs), ("rhs", rhs), ("lhs_scales", lhs_scales), ("rhs_scales", rhs_scales))
    bad = [f"{n} {tuple(np.shape(x))}" for n, x in named if np.ndim(x) != 3]
    if bad:
        raise ValueError(
            "scaled_matmul: expected 3-dimensional lhs (B, M, K), rhs (B, N, K), lhs_scales "
            f"(B, M, K // block), rhs_scales (B, N, K // block); got {', '.join(bad)}"
        )
    (B, M, K), (Bb, N, Kb) = lhs.shape, rhs.shape
    if (B, K) != (Bb, Kb):
        raise ValueError(
            f"lhs, rhs: batch (B) and contracting (K) sizes differ: lhs {lhs.shape}, "
            f"rhs {rhs.shape}"
        )
    (Bs, Ms, Ks), (Bbs, Ns, Kbs) = lhs_scales.shape, rhs_scales.shape
    if (Bs, Ks) != (Bbs, Kbs):
        raise ValueError(
            f"lhs_scales, rhs_scales: batch (B) and block (K // block) sizes differ: "
            f"lhs_scales {lhs_scales.shape}, rhs_scales {rhs_scales.shape}"
        )
    if (Ms, Ns) != (M, N):
        raise ValueError(
            f"lhs_scales, rhs_scales: M and N must be those of lhs and rhs: lhs {lhs.shape}, "
            f"rhs {rhs.shape}, lhs_scales {lhs_scales.shape}, rhs_scales {rhs_scales.shape}"
        )
    if Bs != B:  # jax.nn leaves this to its backend
        raise ValueError(
            f"lhs_scales: batch size {Bs} differs from lhs's {B} (shapes {lhs_scales.shape}, "
            f"{lhs.shape})"
        )
    if Ks == 0 or K % Ks:
        raise ValueError(
            f"lhs_scales: K = {K} is not a whole number of blocks of K // {Ks}; expected "
            f"K // block scales per row (block 32 for MX, 16 for NVFP4), got {Ks}"
        )
    return K // Ks


def _host_bits(x):
    """NumPy arrays of the 6-bit types (which XLA cannot hold) -> uint8 bits, on the host."""
    if isinstance(x, np.ndarray) and x.dtype.name in ("float6_e3m2fn", "float6_e2m3fn"):
        return jnp.asarray(x.view(np.uint8))
    return jnp.asarray(x)


def _bits(x):
    """uint8 raw bits of an ml_dtypes array (4-bit types through uint4) or of uint8 bits."""
    x = jnp.asarray(x)
    if x.dtype == jnp.uint8:
        return x
    if jnp.dtype(x.dtype).itemsize == 1 and _dtype_name(x) != "float4_e2m1fn":
        return jax.lax.bitcast_convert_type(x, jnp.uint8)
    return jax.lax.bitcast_convert_type(x, jnp.uint4).astype(jnp.uint8)


def _is_float(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


@dataclasses.dataclass(frozen=True)
class _Matmul:
    """The static part of one scaled_matmul: instruction, formats, block."""

    ins: Instruction
    afmt: str
    bfmt: str
    block: int

    def quantized(self, a, b, sa, sb):
        """(B, M, K), (B, N, K) bits and their scales -> Quantized A [B, M, K], B [B, K, N]."""
        st, blk = self.ins.stype, self.block
        qa = Quantized(_bits(a), _bits(sa), None, self.afmt, st, blk, -1)
        T = lambda x: jnp.swapaxes(_bits(x), -1, -2)  # noqa: E731
        qb = Quantized(T(b), T(sb), None, self.bfmt, st, blk, -2)
        return qa, qb

    def values(self, x, fmt):
        """float32 values the instruction reads (ue4m3 scales without their sign)."""
        return decode(fmt, _bits(x).astype(jnp.uint32)).astype(F32)


_E8M0_NO_DERIVATIVE = (
    "{name}: float8_e8m0fnu holds neither zero nor negative values, so it cannot carry a "
    "derivative; differentiate with respect to lhs / rhs, or give float8_e4m3fn (ue4m3) "
    "scales"
)


def _scale_tangent(name: str, d, s, aux):
    """The tangent of the scale the instruction reads, ``|s|`` (ue4m3 ignores the sign
    bit): ``d * sign(s)``; float8_e8m0fnu scales refuse a derivative."""
    if _dtype_name(s) == "float8_e8m0fnu":
        raise TypeError(_E8M0_NO_DERIVATIVE.format(name=name))
    return d.astype(F32) * jnp.sign(s.astype(F32))


_SCALE_TANGENTS = (
    None,
    None,
    functools.partial(_scale_tangent, "lhs_scales"),
    functools.partial(_scale_tangent, "rhs_scales"),
)


def _scaled_matmul_ste(cfg: _Matmul, a, b, sa, sb):
    """The GEMM with the straight-through tangent of the exact product
    ``(a * sa) @ (b * sb)^T`` of the values read (:func:`jaxmma.util.gemm_straight_through`)."""

    def forward(a, b, _, sa, sb, aux):
        qa, qb = cfg.quantized(a, b, sa, sb)
        return _gemm.matmul(qa, qb, instruction=cfg.ins)

    def values(a, b, sa, sb, aux):
        fmts = (cfg.afmt, cfg.bfmt, cfg.ins.stype, cfg.ins.stype)
        return tuple(cfg.values(x, f) for x, f in zip((a, b, sa, sb), fmts, strict=True))

    block = functools.partial(jnp.repeat, repeats=cfg.block, axis=-1)
    exact = util.GemmExact(
        scale_a=block,
        scale_b=block,
        product=functools.partial(jnp.einsum, "bmk,bnk->bmn", precision=HIGHEST),
    )
    return util.gemm_straight_through(
        forward, values, a, b, None, sa, sb, exact=exact, lifts=_SCALE_TANGENTS
    )


def scaled_matmul(
    lhs: ArrayLike,
    rhs: ArrayLike,
    lhs_scales: ArrayLike,
    rhs_scales: ArrayLike,
    preferred_element_type: DTypeLike = np.float32,
    *,
    instruction: str | Instruction | None = None,
    arch: str | None = None,
) -> jax.Array:
    """``jax.nn.scaled_matmul`` on a block-scaled ``mma.sync`` of ``sm_120a``, bit-exact.

    ``out[b, m, n] = sum_k (lhs[b, m, k] * lhs_scales[b, m, k // block]) *
    (rhs[b, n, k] * rhs_scales[b, n, k // block])``, the block inferred as
    ``K // lhs_scales.shape[-1]``, computed as a GEMM chaining the instruction along K
    (:func:`jaxmma.matmul` with :class:`jaxmma.quant.Quantized` operands of the same bits).

    Args:
      lhs: ``(B, M, K)`` elements: ``float8_e4m3fn``, ``float8_e5m2``, ``float4_e2m1fn``
        (jax arrays), ``float6_e3m2fn`` / ``float6_e2m3fn`` (NumPy arrays: XLA has no 6-bit
        type), or uint8 raw bits when ``instruction`` names their format.
      rhs: ``(B, N, K)``, the same element types (the two may differ, e.g. e4m3 x e5m2).
      lhs_scales: ``(B, M, K // block)``: ``float8_e8m0fnu`` (MX, block 32) or
        ``float8_e4m3fn`` (NVFP4, block 16, with ``float4_e2m1fn`` elements; the sign bit
        is ignored, as the instruction ignores it); uint8 raw bits with ``instruction``.
      rhs_scales: ``(B, N, K // block)``, the scale type of ``lhs_scales``.
      preferred_element_type: float32 (default), bfloat16 or float16: the f32 result
        rounded to nearest.
      instruction: (keyword) a dense block-scaled ``mma`` text or
        :class:`jaxmma.Instruction`; default: ``kind::mxf8f6f4 ... scale_vec::1X ... .ue8m0``
        (m16n8k32) for ue8m0 scales, ``kind::mxf4nvf4 ... scale_vec::4X ... .ue4m3``
        (m16n8k64) for ue4m3 scales.
      arch: (keyword) the architecture whose model computes it (default: the form's,
        ``sm_120a``).

    Returns:
      ``(B, M, N)`` in ``preferred_element_type``.

    Raises:
      ValueError: the shape errors of ``jax.nn.scaled_matmul``, K not a whole number of
        blocks, a block size no instruction takes (e.g. 8).
      TypeError: element or scale dtypes no block-scaled instruction takes (float32,
        mixed scale types, e4m3 elements with e4m3 scales), a bad
        ``preferred_element_type``.

    Derivatives: straight-through, the tangent of the exact float32 product of the
    values read, with respect to the elements (and to ``float8_e4m3fn`` scales).

    Example:
      >>> import jax.numpy as jnp, jaxmma
      >>> a = jnp.ones((1, 16, 64), jnp.float8_e4m3fn)
      >>> s = jnp.full((1, 16, 2), 0.5, jnp.float8_e8m0fnu)
      >>> jaxmma.scaled_matmul(a, a, s, s)[0, 0, 0]
      Array(16., dtype=float32)
    """
    lhs, rhs = (x if isinstance(x, np.ndarray) else jnp.asarray(x) for x in (lhs, rhs))
    lhs_scales, rhs_scales = jnp.asarray(lhs_scales), jnp.asarray(rhs_scales)
    block = _check_matmul_shapes(lhs, rhs, lhs_scales, rhs_scales)
    out_dtype = _out_dtype(preferred_element_type, "scaled_matmul")
    ins = None if instruction is None else _config.resolve(instruction, arch)
    fa, fb = _element_format("lhs", lhs, ins), _element_format("rhs", rhs, ins)
    st = (
        _scale_format("lhs_scales", lhs_scales, ins),
        _scale_format("rhs_scales", rhs_scales, ins),
    )
    names = ("lhs", "rhs", "lhs_scales", "rhs_scales")
    ins = _pick(fa, fb, st, block, instruction=instruction, arch=arch, names=names)
    lhs, rhs = _host_bits(lhs), _host_bits(rhs)
    cfg = _Matmul(ins, fa, fb, block)
    return _scaled_matmul_ste(cfg, lhs, rhs, lhs_scales, rhs_scales).astype(out_dtype)


# ---------------------------------------------------------------------------------------
# scaled_dot_general: configs and the quantize-inside path
@dataclasses.dataclass(frozen=True)
class _Side:
    """One operand's quantization, read from a jax.nn BlockScaleConfig."""

    mode: str
    fmt: str
    stype: str
    block: int

    def quantize(self, x, axis, global_scale):
        """jax.nn's recipe on jaxmma's exact quantizers (``docs/scaled_dot.md``)."""
        if self.mode == "mxfp8":  # amax / max rounded up to a power of two
            return quantize_mx(x, self.fmt, axis=axis, block=self.block, scale_rounding="ceil")
        return quantize_nvfp4(
            x, axis=axis, block=self.block, global_scale=global_scale, scale_rounding="nearest"
        )


def _side(i: int, config) -> tuple[_Side, jax.Array | None]:
    name = f"configs[{i}]"
    missing = [
        f for f in ("mode", "block_size", "data_type", "scale_type") if not hasattr(config, f)
    ]
    if missing:
        raise TypeError(
            f"{name}: expected a BlockScaleConfig (jax.nn.get_scaled_dot_general_config), got "
            f"{type(config).__name__} without {', '.join(missing)}"
        )
    mode = config.mode
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{name}.mode: expected one of {list(MODES)}, got {mode!r}"[:300])
    dtypes = {}
    for field in ("data_type", "scale_type"):
        try:
            dtypes[field] = np.dtype(getattr(config, field)).name
        except TypeError:
            raise TypeError(
                f"{name}.{field}: expected a dtype, got {getattr(config, field)!r}"[:300]
            ) from None
    fmt = ELEMENT_DTYPES.get(dtypes["data_type"])
    if fmt is None:
        raise TypeError(
            f"{name}.data_type: expected one of {', '.join(ELEMENT_DTYPES)}, got "
            f"{dtypes['data_type']}"
        )
    stype = SCALE_DTYPES.get(dtypes["scale_type"])
    want = "ue8m0" if mode == "mxfp8" else "ue4m3"
    if stype != want:
        raise TypeError(
            f"{name}.scale_type: mode {mode!r} takes "
            f"{'float8_e8m0fnu' if want == 'ue8m0' else 'float8_e4m3fn'}, got "
            f"{dtypes['scale_type']}"
        )
    if mode == "nvfp4" and fmt != "e2m1":
        raise TypeError(f"{name}.data_type: mode 'nvfp4' takes float4_e2m1fn, got {fmt}")
    block = config.block_size
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"{name}.block_size: expected a positive int, got {block!r}")
    g = None
    if mode == "nvfp4":
        g = getattr(config, "global_scale", None)
        g = jnp.ones((), F32) if g is None else jnp.asarray(g)
        if g.size != 1 or g.dtype != F32:
            raise TypeError(
                f"{name}.global_scale: expected one float32 value (shape () or (1,)), got "
                f"{g.dtype} {g.shape}"
            )
        g = g.reshape(())
    return _Side(mode, fmt, stype, int(block)), g


def _pair(sides, *, instruction, arch, configs):
    """The instruction that multiplies operands quantized per two configs (``configs``:
    their names, ``"configs[0]"``, ...), errors naming the configs' fields."""
    (a, _), (b, _) = sides
    ca, cb = configs
    blocks = f"{ca}.block_size, {cb}.block_size"
    if a.stype == b.stype and a.block != b.block:
        raise ValueError(
            f"{blocks}: block sizes {a.block} and {b.block} differ; one instruction takes "
            "one block size for both operands"
        )
    names = (f"{ca}.data_type", f"{cb}.data_type", f"{ca}.scale_type", f"{cb}.scale_type")
    return _pick(
        a.fmt, b.fmt, (a.stype, b.stype), a.block, instruction=instruction, arch=arch,
        names=names, block_name=blocks,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Dot:
    """The static part of one scaled_dot_general on (B, M, K) x (B, N, K)."""

    ins: Instruction
    lhs: _Side
    rhs: _Side


def _gemm_3d(cfg: _Dot, gl, gr, L, R):
    """``L (B, M, K) x R (B, N, K) -> (B, M, N)`` float32: both quantized along K per their
    sides, multiplied by ``cfg.ins``, NVFP4 global scales applied in f32 after the chain;
    the straight-through rule of :func:`jaxmma.matmul`."""

    def quantize(x, *, axis):  # matmul quantizes A along -1 and B along -2
        side, g = (cfg.lhs, gl) if axis == -1 else (cfg.rhs, gr)
        return side.quantize(x, axis, g)

    return _gemm.matmul(L, jnp.swapaxes(R, -1, -2), instruction=cfg.ins, quantize=quantize)


def _as_float(x):
    """float32 for the quantizers (they take f32, f16, bf16 exactly); other floats cast."""
    if x.dtype in (jnp.dtype(F32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return x
    return x.astype(F32)


@dataclasses.dataclass(frozen=True)
class _Backward:
    """jax.nn's backward GEMMs: ``dL`` and ``dR`` configurations (None: nvfp4, float32
    GEMMs with the clipping mask), and the output type they round to."""

    lhs: _Dot | None
    rhs: _Dot | None
    out_dtype: np.dtype


# Not the straight-through rule of util._ste, by design: jax.nn's backward quantizes G and
# the raw float operands again (along the backward contraction, not the values the
# forward read), and an nvfp4 configs[2] zeroes gradients where the forward clipped, which
# reads the operands beside the gradient GEMM. A recipe backward, as in training/.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _gemm_3d_configs(cfg, bwd, gl, gr, gg, L, R):
    return _gemm_3d(cfg, gl, gr, L, R)


def _configs_fwd(cfg, bwd, gl, gr, gg, L, R):
    return _gemm_3d(cfg, gl, gr, L, R), (gl, gr, gg, L, R)


def _configs_bwd(cfg, bwd, res, G):
    """jax.nn's backward: ``dL = G @ R`` and ``dR = G^T @ L``, each quantized along its
    contracting axis (configs[2] for G, configs[1] / configs[0] for R / L) and run on
    the block-scaled instruction; with an nvfp4 configs[2], plain float32 products and
    gradients zeroed where the forward quantization clipped (``|x| > g * 6 * 448``)."""
    gl, gr, gg, L, R = res
    G = G.astype(F32)
    if bwd.lhs is None:  # nvfp4 gradients: unquantized float32 GEMMs
        prod = functools.partial(jnp.einsum, precision=HIGHEST)
        dL = prod("bmn,bnk->bmk", G, R.astype(F32))
        dR = prod("bmn,bmk->bnk", G, L.astype(F32))
        dL = jnp.where(jnp.abs(L.astype(F32)) <= gl * F32(6) * F32(448), dL, F32(0))
        dR = jnp.where(jnp.abs(R.astype(F32)) <= gr * F32(6) * F32(448), dR, F32(0))
    else:
        dL = _gemm_3d(bwd.lhs, gg, gl, G, jnp.swapaxes(R, -1, -2))
        dR = _gemm_3d(bwd.rhs, gg, gr, jnp.swapaxes(G, -1, -2), jnp.swapaxes(L, -1, -2))
    zero = lambda g: None if g is None else jnp.zeros_like(g)  # noqa: E731
    dL, dR = (d.astype(bwd.out_dtype).astype(x.dtype) for d, x in ((dL, L), (dR, R)))
    return zero(gl), zero(gr), zero(gg), dL, dR


_gemm_3d_configs.defvjp(_configs_fwd, _configs_bwd)


def _normalize(x, contract, batch):
    """``x`` -> ``(B, rows, K)``: batch dims, free dims, contracting dims in the order given."""
    free = [d for d in range(x.ndim) if d not in contract and d not in batch]
    size = lambda dims: math.prod(x.shape[d] for d in dims)  # noqa: E731
    t = jnp.transpose(x, list(batch) + free + list(contract))
    return t.reshape((size(batch), size(free), size(contract))), [x.shape[d] for d in free]


def scaled_dot_general(
    lhs: ArrayLike,
    rhs: ArrayLike,
    dimension_numbers: tuple[tuple[Any, Any], tuple[Any, Any]],
    preferred_element_type: DTypeLike = np.float32,
    configs: Sequence[Any] | None = None,
    implementation: Any = None,
    *,
    instruction: str | Instruction | None = None,
    arch: str | None = None,
    grad: Literal["ste", "configs"] = "ste",
    precision: Any = None,
) -> jax.Array:
    """``jax.nn.scaled_dot_general`` on a block-scaled ``mma.sync`` of ``sm_120a``.

    Float inputs are quantized inside, per ``configs[0]`` (lhs) and ``configs[1]`` (rhs),
    along their contracting dimensions, as jax.nn does: ``"mxfp8"`` configs take
    ``amax / max`` rounded up to a power of two (:func:`jaxmma.quant.quantize_mx` with
    ``scale_rounding="ceil"``), ``"nvfp4"`` configs divide by the config's global scale and
    round ``amax / 6`` to the nearest ue4m3 (:func:`jaxmma.quant.quantize_nvfp4` with that
    global scale); then the product runs as :func:`scaled_matmul` does, NVFP4's global
    scales multiplying the f32 result.

    Args:
      lhs, rhs: float arrays (float32, bfloat16, float16; fp8 types are cast to float32).
        Doubles follow the quantizers' rule (docs/dtypes.md): values float32 holds
        exactly are taken, others (and float64 arrays) are a TypeError, x64 on or off.
      dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``
        as for ``jax.lax.dot_general``; the contracting dims are flattened into K in the
        order listed there, and blocks run along that K.
      preferred_element_type: float32 (default), bfloat16 or float16.
      configs: ``[lhs, rhs, gradient]`` ``BlockScaleConfig`` objects from
        ``jax.nn.get_scaled_dot_general_config("mxfp8" | "nvfp4")`` (or built with other
        element types: e5m2, e3m2, e2m3, e2m1 with ue8m0 scales). None: a plain
        ``jax.lax.dot_general``, as jax.nn does.
      implementation: ignored (deprecated in jax.nn as well; a DeprecationWarning).
      precision: (keyword) accepted and ignored, as by :func:`jaxmma.dot_general`: the
        instruction decides the arithmetic. It lets the function stand in for a layer's
        ``dot_general`` (flax's ``nn.Dense(dot_general=...)`` passes ``precision=``).
      instruction, arch: (keyword) as for :func:`scaled_matmul`.
      grad: (keyword) ``"ste"``: the GEMM layer's straight-through rule (the tangent of the
        exact product of the dequantized operands, ``docs/gemm.md``); ``"configs"``:
        jax.nn's custom VJP, whose two backward GEMMs quantize ``G`` per ``configs[2]``
        and the other operand per its own config along the backward contraction (an
        ``nvfp4`` ``configs[2]``: float32 GEMMs, gradients zeroed where the forward
        clipped).

    Returns:
      The ``lax.dot_general`` shape (batch, lhs free, rhs free) in
      ``preferred_element_type``.

    Raises:
      TypeError: ``preferred_element_type`` not f32/bf16/f16 (as jax.nn), configs of
        types no instruction takes, mixed scale types. ValueError: bad dimension numbers,
        a bad mode, differing or unsupported block sizes, a bad ``grad``.

    Example:
      >>> import jax, jax.numpy as jnp, jaxmma
      >>> cfg = jax.nn.get_scaled_dot_general_config("mxfp8")
      >>> x = jnp.ones((2, 16, 64)); w = jnp.ones((2, 8, 64))
      >>> jaxmma.scaled_dot_general(x, w, (((2,), (2,)), ((0,), (0,))),
      ...                           configs=[cfg] * 3)[0, 0, 0]
      Array(64., dtype=float32)
    """
    del precision
    if implementation is not None:
        warnings.warn(
            "implementation: ignored (jaxmma computes the instruction's bits on any backend)",
            DeprecationWarning,
            stacklevel=2,
        )
    if configs is None:
        return jax.lax.dot_general(
            lhs, rhs, dimension_numbers, preferred_element_type=preferred_element_type
        )
    out_dtype = _out_dtype(preferred_element_type, "scaled_dot_general")
    if grad not in GRADS:
        raise ValueError(f"grad: expected one of {list(GRADS)}, got {grad!r}")
    try:
        configs = list(configs)
    except TypeError:
        raise TypeError(
            f"configs: expected a list of BlockScaleConfig [lhs, rhs, gradient], got "
            f"{type(configs).__name__}"
        ) from None
    need = 3 if grad == "configs" else 2
    if len(configs) < need or len(configs) > 3:
        raise ValueError(
            f"configs: expected [lhs, rhs, gradient] configs ({need} at least for "
            f"grad={grad!r}), got {len(configs)}"
        )
    # the quantizers' rule for doubles, as matmul's: exact in float32, or a TypeError
    lhs, rhs = (jnp.asarray(exact_float32(x, n)) for x, n in ((lhs, "lhs"), (rhs, "rhs")))
    for name, x in (("lhs", lhs), ("rhs", rhs)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{name}: expected a float array to quantize, got {x.dtype}")
    (lc, rc), (lb, rb) = _gemm._dimension_numbers(dimension_numbers, lhs, rhs)
    sides = [_side(i, c) for i, c in enumerate(configs)]
    ins = _pair(sides[:2], instruction=instruction, arch=arch, configs=("configs[0]", "configs[1]"))
    cfg = _Dot(ins, sides[0][0], sides[1][0])
    L, lfree = _normalize(_as_float(lhs), lc, lb)
    R, rfree = _normalize(_as_float(rhs), rc, rb)
    gl, gr = sides[0][1], sides[1][1]
    if grad == "ste":
        out = _gemm_3d(cfg, gl, gr, L, R)
    else:
        bwd, gg = _Backward(None, None, out_dtype), sides[2][1]
        if sides[2][0].mode == "nvfp4" and (gl is None or gr is None):
            raise ValueError(
                "configs[2]: an 'nvfp4' gradient config zeroes gradients by the lhs and rhs "
                "global scales (jax.nn's rule), so configs[0] and configs[1] must be 'nvfp4' "
                f"too, got {sides[0][0].mode!r} and {sides[1][0].mode!r}"
            )
        if sides[2][0].mode != "nvfp4":
            nl, nr = ("configs[2]", "configs[1]"), ("configs[2]", "configs[0]")
            sl = _pair([sides[2], sides[1]], instruction=None, arch=arch, configs=nl)
            sr = _pair([sides[2], sides[0]], instruction=None, arch=arch, configs=nr)
            dl, dr = _Dot(sl, sides[2][0], sides[1][0]), _Dot(sr, sides[2][0], sides[0][0])
            bwd = _Backward(dl, dr, out_dtype)
        out = _gemm_3d_configs(cfg, bwd, gl, gr, gg, L, R)
    batch = [lhs.shape[d] for d in lb]
    return out.reshape(batch + lfree + rfree).astype(out_dtype)
