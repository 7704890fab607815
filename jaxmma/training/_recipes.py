"""Training recipes: which tensors are quantized how, for each GEMM of a linear layer.

A :class:`Recipe` is frozen configuration (hashable, a ``jit`` static argument); its
state, where it has one (delayed scaling's amax histories), is an explicit pytree made
by :meth:`Recipe.init`. Each constructor names what it reproduces, with the public
source (docs/recipes.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .. import operands
from ..gemm import dot_general as _dot_general
from ..gemm import matmul as _matmul
from ..gemm import resolve
from ..operands import ScaleRounding
from . import _fp8, _keys, _mx, _nvfp4, _scales
from ._scales import GradRounding

F32 = jnp.float32
FP8 = "mma.sync.aligned.m16n8k32.row.col.f32.{a}.{b}.f32"
BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
NVFP4 = (
    "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16.m128n256k64.f32.e2m1.e2m1.ue4m3"
)
#: MXFP8 (``kind::mxf8f6f4``) and MXFP4 (``kind::mxf4``) on tcgen05, sm_100a (B200)
MXFP8 = "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32.m128n256k32.f32.{a}.{b}.ue8m0"
MXFP4 = "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.block32.m128n256k64.f32.e2m1.e2m1.ue8m0"
SCALINGS = ("none", "tensor", "delayed", "row", "block", "nvfp4", "mx")
AmaxCompute = Literal["max", "most_recent"]
AMAX_COMPUTE: tuple[str, ...] = get_args(AmaxCompute)
#: the block-scaled recipes: they pad M, K and N with zeros (:meth:`Recipe.pad_to`)
PADDED = ("nvfp4", "mx", "block")
Fp8Format = Literal["e4m3", "e5m2"]
FP8_FORMATS: tuple[str, ...] = get_args(Fp8Format)
#: the state of delayed scaling (:meth:`Recipe.init`)
State = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One training recipe (see the constructors: :func:`bf16`, :func:`current_scaling`,
    :func:`delayed_scaling`, :func:`rowwise`, :func:`blockwise`, :func:`nvfp4`,
    :func:`mxfp8`, :func:`mxfp4`)."""

    name: str
    scaling: str
    forward: str
    dgrad: str | None
    wgrad: str | None
    arch: str
    promote_every: int | None = None
    x_fmt: str = "e4m3"
    w_fmt: str = "e4m3"
    g_fmt: str = "e5m2"
    margin: int = 0
    history: int = 0
    amax_compute: str = "max"
    grad_rounding: str = "rn"
    hadamard: bool = False
    source: str = ""
    scale_rounding: str = "floor"  # MX recipes: how the ue8m0 block scales are rounded

    def init(self) -> State | None:
        """The recipe's state: delayed scaling's amax histories ``{"x", "w", "g"}``
        (float32 ``[history]``, zeros: the first step uses scale 1); None otherwise."""
        if self.scaling != "delayed":
            return None
        return {k: jnp.zeros((self.history,), F32) for k in ("x", "w", "g")}

    def matmul(
        self,
        x: ArrayLike,
        w: ArrayLike,
        state: State | None = None,
        *,
        key: jax.Array | None = None,
    ) -> jax.Array:
        """``x [..., K] @ w [K, N]`` -> float32 ``[..., N]`` under this recipe.

        Args:
          x: float activations, any leading dimensions (flattened into the GEMM's M).
          w: float weights ``[K, N]``.
          state: :meth:`init`'s pytree for delayed scaling (None otherwise). Its next
            value is its cotangent: ``jax.grad(loss, argnums=<state>)`` returns it.
          key: a ``jax.random`` key for the backward's random numbers (stochastic
            gradient rounding, the NVFP4 Hadamard signs), or None. The forward draws
            nothing, so evaluation needs no key; differentiating a recipe that draws
            without one is a ValueError. A recipe that draws nothing ignores a key.

        The block-scaled recipes (``nvfp4``, ``mxfp8``, ``mxfp4``, ``blockwise``) take
        any M, K and N: x and w are padded with zeros to multiples of :attr:`pad_to` (the
        k of the recipe's instructions; 128 for ``blockwise``) and the output sliced: the
        bits of the recipe on the zero-padded tensors (padded K contributes +0 products,
        a block's zeros leave its amax and scale as they are), as ``jaxmma.matmul`` pads
        a ragged K and as a kernel that fills the tiles beyond the tensor with zeros
        computes, stochastic rounding's random bits included.

        Raises:
          ValueError: a state of the wrong structure or amax history length; when
            differentiated, a missing key where the backward draws.
        """
        _check_state(self, state)
        x, w = jnp.asarray(x), jnp.asarray(w)
        if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[0]:
            raise ValueError(f"x, w: expected x [..., K] and w [K, N], got {x.shape} and {w.shape}")
        lead, K, N = x.shape[:-1], w.shape[0], w.shape[1]
        M = math.prod(lead)
        x2 = x.reshape(M, K).astype(F32)
        w32 = w.astype(F32)
        key = _keys.used(self, key)
        if self.scaling == "none":
            y = _matmul(
                x2, w32, instruction=self.forward, arch=self.arch,
                dgrad_instruction=self.dgrad, wgrad_instruction=self.wgrad,
            )  # fmt: skip
        elif self.scaling in PADDED:
            up = lambda n: -(-n // self.pad_to) * self.pad_to  # noqa: E731
            xp, wp = _padded(x2, up(M), up(K)), _padded(w32, up(K), up(N))
            if self.scaling == "block":
                y = _fp8.linear(self, xp, wp, state, key)
            else:
                linear = _nvfp4.linear if self.scaling == "nvfp4" else _mx.linear
                y = linear(self, xp, wp, key)
            y = y[:M, :N] if (up(M), up(N)) != (M, N) else y
        else:
            y = _fp8.linear(self, x2, w32, state, key)
        return y.reshape(lead + (N,))

    @property
    def pad_to(self) -> int:
        """The multiple the block-scaled recipes pad M, K and N to: the least common
        multiple of their instructions' k (64 for the NVFP4 and MXFP4 forms, 32 for
        MXFP8), which the blocks (16, 32) divide; 128 for ``blockwise`` (its 1 x 128 and
        128 x 128 blocks); 1 for the others."""
        if self.scaling not in PADDED:
            return 1
        if self.scaling == "block":
            return _fp8.GROUP
        texts = dict.fromkeys((self.forward, self.dgrad, self.wgrad))
        # padded recipes name all three texts, of forms that have a k
        return math.lcm(*(resolve(t, self.arch).k for t in texts))  # type: ignore[arg-type]

    def dot_general(
        self, state: State | None = None, *, key: jax.Array | None = None
    ) -> Callable[..., jax.Array]:
        """A ``jax.lax.dot_general`` stand-in running this recipe (the ``dot_general=``
        of flax's ``nn.Dense``): ``lhs [..., K]`` contracted with ``rhs [K, N]`` on
        ``dimension_numbers`` ``(((lhs.ndim - 1,), (0,)), ((), ()))``."""
        return functools.partial(_recipe_dot_general, self, state, key)


def _recipe_dot_general(
    recipe, state, key, lhs, rhs, dimension_numbers, precision=None,
    preferred_element_type=None, **kw,
):  # fmt: skip
    del precision
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = jnp.asarray(lhs), jnp.asarray(rhs)
    if tuple(lb) or tuple(rb) or tuple(lc) != (lhs.ndim - 1,) or tuple(rc) != (0,):
        if recipe.scaling == "none":  # a plain emulated GEMM takes any dot_general
            return _dot_general(
                lhs, rhs, dimension_numbers, preferred_element_type=preferred_element_type,
                instruction=recipe.forward, arch=recipe.arch,
            )  # fmt: skip
        raise ValueError(
            f"dimension_numbers: recipe {recipe.name!r} takes a linear layer's "
            f"(((lhs.ndim - 1,), (0,)), ((), ())) with a 2-D rhs, got {dimension_numbers}"
        )
    if rhs.ndim != 2:
        raise ValueError(f"rhs: expected a 2-D kernel [K, N], got shape {rhs.shape}")
    out = recipe.matmul(lhs, rhs, state, key=key)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _check_state(r: Recipe, state) -> None:
    if r.scaling != "delayed":
        if state is not None:
            raise ValueError(f"state: recipe {r.name!r} keeps no state; expected None")
        return
    if not isinstance(state, dict) or set(state) != {"x", "w", "g"}:
        raise ValueError(
            f"state: expected recipe.init()'s dict of amax histories with keys "
            f"['g', 'w', 'x'], got {type(state).__name__}"
            + (f" with keys {sorted(state)}" if isinstance(state, dict) else "")
        )
    for k in ("x", "w", "g"):
        shape = jnp.shape(state[k])
        if shape != (r.history,):
            raise ValueError(
                f"state: the amax history of {k} has shape {shape}; recipe {r.name!r} "
                f"keeps history={r.history}, expected ({r.history},)"
            )


def _padded(x, rows: int, cols: int):
    """``x [R, C]`` with zero rows and columns up to ``[rows, cols]`` (itself if none)."""
    R, C = x.shape
    return x if (R, C) == (rows, cols) else jnp.pad(x, ((0, rows - R), (0, cols - C)))


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")
    return value


def _int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    return value


def _fp8_recipe(name, scaling, source, *, arch, promote_every, x_fmt, w_fmt, g_fmt, margin,
                grad_rounding, instructions=None, history=0, amax_compute="max"):  # fmt: skip
    for n, v in (("x_fmt", x_fmt), ("w_fmt", w_fmt), ("g_fmt", g_fmt)):
        _choice(n, v, FP8_FORMATS)
    _choice("grad_rounding", grad_rounding, _scales.ROUNDINGS)
    _choice("amax_compute", amax_compute, AMAX_COMPUTE)
    _int("margin", margin, 0)
    if promote_every is not None:
        _int("promote_every", promote_every, 1)
    if instructions is not None and not (
        isinstance(instructions, tuple | list) and len(instructions) == 3
    ):
        raise TypeError(
            "instructions: expected None or (forward, dgrad, wgrad) instruction texts, got "
            f"{instructions!r}"[:300]
        )
    fwd, dgrad, wgrad = instructions or (
        FP8.format(a=x_fmt, b=w_fmt),
        FP8.format(a=g_fmt, b=w_fmt),
        FP8.format(a=x_fmt, b=g_fmt),
    )
    for n, text in (("forward", fwd), ("dgrad", dgrad), ("wgrad", wgrad)):
        # errors name the form and arch now, not at the first step
        ins = resolve(text, arch, name="instructions")
        if ins.stype or ins.sparse or ins.dtype != "f32":
            raise ValueError(f"instructions: the {n} GEMM needs a dense .f32 form, got {text}")
    return Recipe(
        name, scaling, fwd, dgrad, wgrad, arch, promote_every, x_fmt, w_fmt, g_fmt, margin,
        history, amax_compute, grad_rounding, False, source,
    )  # fmt: skip


def bf16(*, arch: str = "sm_90", instruction: str = BF16) -> Recipe:
    """bf16 GEMMs (forward, dgrad and wgrad) with f32 accumulation: the baseline."""
    ins = resolve(instruction, arch, name="instruction")  # errors now, not at the first step
    if ins.stype or ins.sparse:
        raise ValueError(f"instruction: expected a dense mma form, got {ins.text!r}")
    return Recipe("bf16", "none", instruction, instruction, instruction, arch,
                  source="baseline")  # fmt: skip


def current_scaling(
    *,
    arch: str = "sm_90",
    promote_every: int | None = 4,
    margin: int = 0,
    x_fmt: Fp8Format = "e4m3",
    w_fmt: Fp8Format = "e4m3",
    g_fmt: Fp8Format = "e5m2",
    grad_rounding: GradRounding = "rn",
    instructions: Sequence[str] | None = None,
) -> Recipe:
    """Per-tensor current scaling (torchao float8 "tensorwise": one scale per tensor from
    its own amax, computed at each step): forward e4m3 x e4m3, dgrad e5m2 x e4m3, wgrad
    e4m3 x e5m2, the backward reusing the forward's e4m3 x and w.

    ``instructions``: ``(forward, dgrad, wgrad)`` texts to use instead of the m16n8k32
    ``mma.sync`` forms of these formats; ``promote_every``: k-steps between promotions
    (4: every 128 elements of K)."""
    return _fp8_recipe(
        "current_scaling", "tensor", "torchao float8 tensorwise (dynamic per-tensor scales)",
        arch=arch, promote_every=promote_every, x_fmt=x_fmt, w_fmt=w_fmt, g_fmt=g_fmt,
        margin=margin, grad_rounding=grad_rounding, instructions=instructions,
    )  # fmt: skip


def delayed_scaling(
    *,
    history: int = 16,
    amax_compute: AmaxCompute = "max",
    margin: int = 0,
    arch: str = "sm_90",
    promote_every: int | None = 4,
    x_fmt: Fp8Format = "e4m3",
    w_fmt: Fp8Format = "e4m3",
    g_fmt: Fp8Format = "e5m2",
    grad_rounding: GradRounding = "rn",
    instructions: Sequence[str] | None = None,
) -> Recipe:
    """Transformer Engine's delayed scaling ("HYBRID": e4m3 forward, e5m2 backward): the
    scale of each tensor at step t is ``fmax / amax / 2**margin`` with ``amax`` the max
    (``amax_compute="max"``) or the latest (``"most_recent"``) of an amax history of the
    earlier steps; this step's amax enters the history for the next. State:
    :meth:`Recipe.init`; the next state is the state's cotangent."""
    _int("history", history, 1)
    return _fp8_recipe(
        "delayed_scaling", "delayed", "Transformer Engine DelayedScaling (HYBRID)",
        arch=arch, promote_every=promote_every, x_fmt=x_fmt, w_fmt=w_fmt, g_fmt=g_fmt,
        margin=margin, grad_rounding=grad_rounding, instructions=instructions,
        history=history, amax_compute=amax_compute,
    )  # fmt: skip


def rowwise(
    *,
    arch: str = "sm_90",
    promote_every: int | None = 4,
    margin: int = 0,
    x_fmt: Fp8Format = "e4m3",
    w_fmt: Fp8Format = "e4m3",
    g_fmt: Fp8Format = "e5m2",
    grad_rounding: GradRounding = "rn",
    instructions: Sequence[str] | None = None,
) -> Recipe:
    """torchao float8 "rowwise": one scale per row of A and per column of B of each GEMM
    (along its K), applied as ``torch._scaled_mm``'s row-wise epilogue; each backward
    GEMM quantizes its operands along its own K from the high-precision x, w and G."""
    return _fp8_recipe(
        "rowwise", "row", "torchao float8 rowwise (row-wise scales, torch._scaled_mm)",
        arch=arch, promote_every=promote_every, x_fmt=x_fmt, w_fmt=w_fmt, g_fmt=g_fmt,
        margin=margin, grad_rounding=grad_rounding, instructions=instructions,
    )  # fmt: skip


def blockwise(
    *,
    arch: str = "sm_90",
    margin: int = 0,
    grad_rounding: GradRounding = "rn",
    instructions: Sequence[str] | None = None,
) -> Recipe:
    """DeepSeek-V3's fine-grained fp8 (arXiv:2412.19437, section 3.3): e4m3 for every
    tensor; activations and gradients in 1 x 128 tiles, weights in 128 x 128 blocks;
    each 128-wide K group promoted to f32 with its two scales (the cuBLASLt block-scale
    epilogue). dgrad reads the forward's quantized w transposed; wgrad quantizes x^T in
    1 x 128 tiles along M and G in 128 x 128 blocks (the block kernel's B scales)."""
    return _fp8_recipe(
        "blockwise", "block", "DeepSeek-V3 block-wise fp8 (arXiv:2412.19437)",
        arch=arch, promote_every=None, x_fmt="e4m3", w_fmt="e4m3", g_fmt="e4m3",
        margin=margin, grad_rounding=grad_rounding, instructions=instructions,
    )  # fmt: skip


def nvfp4(
    *,
    arch: str = "sm_100a",
    instruction: str = NVFP4,
    grad_rounding: GradRounding = "stochastic",
    hadamard: bool = True,
) -> Recipe:
    """NVIDIA's NVFP4 pretraining recipe (arXiv:2509.25149): e2m1 with a ue4m3 scale per
    16 and a float32 scale per tensor in fprop, dgrad and wgrad; weights in 16 x 16
    blocks, activations and gradients 1 x 16 along K; a 16 x 16 random Hadamard transform
    on both wgrad inputs (``hadamard``, its signs from the step's key in either rounding
    mode); gradients rounded stochastically (a key per step). Evaluation needs no key;
    any M, K, N (zero-padded to multiples of 64). Which layers stay in higher precision
    is the model's choice (docs/recipes.md)."""
    _choice("grad_rounding", grad_rounding, _scales.ROUNDINGS)
    if not isinstance(hadamard, bool):
        raise ValueError(f"hadamard: expected True or False, got {hadamard!r}")
    ins = resolve(instruction, arch, name="instruction")
    if ins.stype != "ue4m3":
        raise ValueError(f"instruction: expected an NVFP4 (.ue4m3 scales) form, got {instruction}")
    return Recipe(
        "nvfp4", "nvfp4", instruction, instruction, instruction, arch,
        x_fmt="e2m1", w_fmt="e2m1", g_fmt="e2m1", grad_rounding=grad_rounding,
        hadamard=hadamard, source="NVIDIA NVFP4 pretraining (arXiv:2509.25149)",
    )  # fmt: skip


def _mx_recipe(name, source, *, arch, instructions: tuple[str, str, str], x_fmt, w_fmt,
               g_fmt, formats, scale_rounding, grad_rounding,
               arg="instructions") -> Recipe:  # fmt: skip
    for n, v in (("x_fmt", x_fmt), ("w_fmt", w_fmt), ("g_fmt", g_fmt)):
        _choice(n, v, formats)
    _choice("scale_rounding", scale_rounding, operands.SCALE_ROUNDINGS)
    _choice("grad_rounding", grad_rounding, _scales.ROUNDINGS)
    want = {"forward": (x_fmt, w_fmt), "dgrad": (g_fmt, w_fmt), "wgrad": (x_fmt, g_fmt)}
    for (gemm, (a, b)), text in zip(want.items(), instructions, strict=True):
        ins = resolve(text, arch, name=arg)  # errors now, not at the first step
        if ins.stype != "ue8m0" or ins.sparse or operands.block_size(ins) != _mx.BLOCK:
            raise ValueError(
                f"{arg}: the {gemm} GEMM needs a dense block-scaled form with ue8m0 "
                f"scales per {_mx.BLOCK} (OCP MX), got {text}"
            )
        if (ins.atype, ins.btype) != (a, b):
            raise ValueError(
                f"{arg}: the {gemm} GEMM multiplies {a} by {b}; expected a .{a}.{b} "
                f"form, got {text}"
            )
    return Recipe(
        name, "mx", *instructions, arch, x_fmt=x_fmt, w_fmt=w_fmt, g_fmt=g_fmt,
        grad_rounding=grad_rounding, source=source, scale_rounding=scale_rounding,
    )  # fmt: skip


def _three(instructions, default):
    if instructions is None:
        return default
    if not (isinstance(instructions, tuple | list) and len(instructions) == 3):
        raise TypeError(
            "instructions: expected None or (forward, dgrad, wgrad) instruction texts, got "
            f"{instructions!r}"[:300]
        )
    return tuple(instructions)


def mxfp8(
    *,
    arch: str = "sm_100a",
    x_fmt: Fp8Format = "e4m3",
    w_fmt: Fp8Format = "e4m3",
    g_fmt: Fp8Format = "e4m3",
    scale_rounding: ScaleRounding = "floor",
    grad_rounding: GradRounding = "rn",
    instructions: Sequence[str] | None = None,
) -> Recipe:
    """MXFP8 training (OCP MX v1.0; torchao's MX linear layer): every GEMM of the layer
    on MXFP8 operands, each quantized along that GEMM's K in blocks of 32 with a ue8m0
    scale (``scale_rounding``: ``"floor"``, the OCP rule and torchao's
    ``ScaleCalculationMode.FLOOR``; ``"ceil"``, amax / max rounded up to a power of two,
    as torchao's ``RCEIL``). fprop x along K and w along K; dgrad G along N and w
    quantized again along N; wgrad x and G along M. Elements rounded to nearest,
    saturating; G to nearest or stochastically (``grad_rounding``, a key per step).

    ``instructions``: ``(forward, dgrad, wgrad)`` texts instead of the ``tcgen05.mma
    kind::mxf8f6f4`` forms of sm_100a (e.g. sm_120a's block-scaled ``mma.sync`` with
    ``arch="sm_120a"``, docs/recipes.md); formats ``"e4m3"`` or ``"e5m2"`` per tensor
    (torchao's default: e4m3 for all three). Any M, K, N (zero-padded to multiples of
    32)."""
    default = (MXFP8.format(a=x_fmt, b=w_fmt), MXFP8.format(a=g_fmt, b=w_fmt),
               MXFP8.format(a=x_fmt, b=g_fmt))  # fmt: skip
    return _mx_recipe(
        "mxfp8", "OCP MX v1.0 MXFP8 (torchao MX training)", arch=arch,
        instructions=_three(instructions, default), x_fmt=x_fmt, w_fmt=w_fmt, g_fmt=g_fmt,
        formats=FP8_FORMATS, scale_rounding=scale_rounding, grad_rounding=grad_rounding,
    )  # fmt: skip


def mxfp4(
    *,
    arch: str = "sm_100a",
    instruction: str = MXFP4,
    scale_rounding: ScaleRounding = "floor",
    grad_rounding: GradRounding = "rn",
) -> Recipe:
    """MXFP4 training (OCP MX v1.0; torchao's MX linear layer with ``float4_e2m1fn_x2``):
    :func:`mxfp8`'s GEMMs and blocks with e2m1 elements, on ``instruction`` for all three
    (default the ``tcgen05.mma kind::mxf4`` form of sm_100a; sm_120a's block-scaled
    ``mma.sync`` ``kind::mxf4`` with ``arch="sm_120a"``). Any M, K, N (zero-padded to
    multiples of 64)."""
    return _mx_recipe(
        "mxfp4", "OCP MX v1.0 MXFP4 (torchao MX training)", arch=arch,
        instructions=(instruction,) * 3, x_fmt="e2m1", w_fmt="e2m1", g_fmt="e2m1",
        formats=("e2m1",), scale_rounding=scale_rounding, grad_rounding=grad_rounding,
        arg="instruction",
    )  # fmt: skip
