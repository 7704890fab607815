"""The static configuration of a GEMM: the public :class:`GemmOptions`, the instruction
it names resolved for its architecture, and the validated :class:`Config` and
:class:`jaxmma.gemm._options.KernelOptions` that ``matmul`` runs.

Every configuration keyword of ``matmul`` / ``dot_general`` is a field of
:class:`GemmOptions`; both paths (an options object, or keywords) go through one
validator, :func:`validate`, so a value is refused with the same error either way, naming
the field (the keyword of the same name).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import jax
import numpy as np
from jax.typing import DTypeLike

from .. import util
from ..instructions import Instruction
from ..instructions import instruction as _parse_text
from . import _native, _options, _pallas, _recipes, _split

#: opcodes whose instruction is a matrix product
PRODUCTS = ("mma", "wmma.mma", "wgmma.mma_async", "tcgen05.mma")


@functools.lru_cache(maxsize=512)
def _parse(text: str, arch: str | None) -> Instruction:
    return _parse_text(text, arch)


def _parse_named(text: str, arch: str | None, name: str) -> Instruction:
    """:func:`_parse`, its errors naming the argument ``name`` (those of ``arch`` name it)."""
    try:
        return _parse(text, arch)
    except ValueError as e:
        if str(e).startswith(("arch", name)):
            raise
        raise ValueError(f"{name}: {e}") from None


def resolve(
    instruction: str | Instruction, arch: str | None = None, *, name: str = "instruction"
) -> Instruction:
    """``instruction`` (text or :class:`Instruction`) for ``arch`` (None: its own); errors
    name the argument ``name``."""
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch: expected None or a str such as 'sm_90', got {type(arch).__name__}")
    if isinstance(instruction, str):
        ins = _parse_named(instruction, arch, name)
    elif isinstance(instruction, Instruction):
        ins = instruction
        if arch is not None and arch != ins.arch:
            ins = _parse_named(ins.text, arch, name)
    else:
        raise TypeError(
            f"{name}: expected PTX text or a jaxmma.Instruction, got {type(instruction).__name__}"
        )
    if ins.opcode not in PRODUCTS:
        raise ValueError(
            f"{name}: {ins.text!r} has no matrix product; expected one of "
            f"{', '.join(PRODUCTS)} (with .sp and .block_scale forms)"
        )
    if ins.negate_a or ins.negate_b:
        raise ValueError(
            f"{name}: {ins.text!r} negates A or B (idesc bits 13-14); a GEMM takes "
            "the instruction without negation (negate the operand instead): allowed: "
            "negate_a=False, negate_b=False"
        )
    return ins


@dataclasses.dataclass(frozen=True)
class Config:
    """The static configuration of one GEMM (hashable: a ``jit`` static argument)."""

    ins: Instruction
    promote_every: int | None = None
    dgrad_ins: Instruction | None = None  # dA = G @ B^T (None: the exact product)
    wgrad_ins: Instruction | None = None  # dB = A^T @ G (None: the exact product)
    path: str = "auto"  # _pallas.MODE when configured: which implementation runs it
    native: bool = False  # the device's own tensor cores run it (see _native)

    @property
    def text(self) -> str:
        return self.ins.text

    @property
    def grad_ins(self) -> Instruction | None:
        """An instruction of the gradient GEMMs, if any runs emulated."""
        return self.dgrad_ins or self.wgrad_ins


def _grad_form(name: str, instruction, ins: Instruction) -> Instruction | None:
    """A gradient GEMM's instruction: text on the forward's arch, an Instruction on its own."""
    if instruction is None:
        return None
    grad = resolve(instruction, ins.arch if isinstance(instruction, str) else None, name=name)
    if grad.sparse or grad.stype:
        raise ValueError(
            f"{name}: expected a dense mma form for the gradient GEMMs, got {grad.text!r}"
        )
    return grad


def config(
    instruction,
    arch=None,
    promote_every=None,
    grad_instruction=None,
    executor="auto",
    dgrad_instruction=None,
    wgrad_instruction=None,
) -> Config:
    ins = resolve(instruction, arch)
    x64 = jax.config.jax_enable_x64  # type: ignore[attr-defined]  # (a flag jax defines)
    if ins.atype == "f64" and not x64:  # before any f64 array is made
        raise ValueError(f"instruction: {ins.text} computes in .f64{util.X64_HINT}")
    if promote_every is not None:
        if isinstance(promote_every, bool) or not isinstance(promote_every, (int, np.integer)):
            raise TypeError(
                f"promote_every: expected None or a positive int, got {promote_every!r}"
            )
        if promote_every <= 0:
            raise ValueError(
                f"promote_every: expected None or a positive number of k-steps, got {promote_every}"
            )
        if ins.dtype != "f32":
            raise ValueError(
                f"promote_every: promotion adds into an f32 total; {ins.text} has "
                f".{ins.dtype} accumulators (allowed only with .f32)"
            )
        promote_every = int(promote_every)
    grad = _grad_form("grad_instruction", grad_instruction, ins)
    dgrad = _grad_form("dgrad_instruction", dgrad_instruction, ins) or grad
    wgrad = _grad_form("wgrad_instruction", wgrad_instruction, ins) or grad
    if executor not in _native.EXECUTORS:
        raise ValueError(
            f"executor: expected one of {', '.join(_native.EXECUTORS)}, got {executor!r}"
        )
    why = None if executor == "emulate" else _native.why_not_here(ins)
    if executor == "native" and why:
        raise ValueError(
            f"executor='native': {ins.text} (arch {ins.arch}) cannot run natively here: "
            f"{why}; use executor='auto' or 'emulate'"
        )
    native = executor != "emulate" and why is None
    return Config(ins, promote_every, dgrad, wgrad, _pallas.MODE, native)


def check_flag(ins: Instruction, check) -> None:
    """``check``: None, or a bool for sparse forms."""
    if check is not None and not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"check: expected None, True or False, got {check!r}")
    if check is not None and not ins.sparse:
        raise ValueError(
            f"check: only sparse (mma.sp) forms have values to check; {ins.text} has none "
            "(allowed: None)"
        )


def check_quantize(ins: Instruction, quantize) -> None:
    """``quantize``: None, or a callable for block-scaled forms."""
    if quantize is None:
        return
    if not ins.stype:
        raise ValueError(f"quantize: only block-scaled forms quantize; {ins.text} does not")
    if not callable(quantize):
        raise TypeError(
            "quantize: expected None or a callable quantize(x, axis=...) -> "
            f"jaxmma.quant.Quantized, got {type(quantize).__name__}"
        )


def refuse_option_forms(ins: Instruction, kernel: dict) -> None:
    """The one rule's first part, before the options' values are read: no kernel option
    (``kernel``: the keywords, None where not given) applies to a block-scaled or a
    ``.f64`` form. A ``ValueError`` naming the first option given."""
    if not (ins.stype or ins.atype == "f64"):
        return
    bad = next((k for k, v in kernel.items() if v is not None), None)
    if bad is not None:
        kind = "block-scaled" if ins.stype else ".f64"
        raise ValueError(f"{bad}: kernel options are not modelled for {kind} forms ({ins.text})")


def refuse_key(opts, key) -> None:
    """The one rule on ``key``: given exactly where ``input_rounding='stochastic'`` is
    (its value is checked by :func:`._prepare.check_key`)."""
    stochastic = opts is not None and opts.input_rounding == "stochastic"
    if stochastic and key is None:
        raise ValueError(
            "key: rounding='stochastic' needs a jax.random key (key=jax.random.key(0)); got None"
        )
    if not stochastic and key is not None:
        raise ValueError(
            "key: only used with rounding='stochastic' (a random key for the conversion "
            f"of float inputs), got rounding={None if opts is None else opts.input_rounding!r}"
        )


def refuse_combinations(cfg: Config, opts, scaled: bool = False) -> None:
    """The one rule on what kernel options (``opts``, None: none) and fp8 scales
    (``scaled``: ``scale_a`` or ``scale_b`` given) combine with: the chain of a dense form
    without emulated gradient GEMMs. A ``ValueError`` naming the options given. The
    forms no option applies to are :func:`refuse_option_forms`, the key
    :func:`refuse_key`, the native executor :func:`config`; what depends on the arrays
    (the recipe their shapes name, C, K) is :func:`refuse_for_arrays`: every combination
    the pipeline refuses is refused in this module (``kernel_options`` checks single
    option values)."""
    if opts is None and not scaled:
        return
    ins = cfg.ins
    if ins.stype or ins.sparse:
        form = "block-scaled" if ins.stype else "sparse"
        given = [] if opts is None else _options.given(opts)
        name = ", ".join(given) if given else "scale_a"
        raise ValueError(f"{name}: not modelled for {form} forms ({ins.text})")
    if cfg.grad_ins is not None:
        raise ValueError("grad_instruction: not combined with kernel options or fp8 scales")


def refuse_for_arrays(cfg: Config, opts, kind: str | None, C, K: int) -> None:
    """The same rule's part that needs the arrays, checked once their shapes are known:
    the fp8 scale recipe their shapes name (``kind``, :func:`._recipes.recipe`), whether
    C is given, and K for the split. A ``ValueError`` naming the option; ``opts`` the
    kernel options (their defaults where only scales were given)."""
    ins = cfg.ins
    k = cast(int, ins.k)  # a form with a matrix product has one
    if kind is not None:
        if ins.dtype != "f32":
            raise ValueError(
                f"scale_a: the scaling recipes scale an f32 accumulator; {ins.text} has "
                f".{ins.dtype}"
            )
        if C is not None and opts.epilogue is None:
            raise ValueError(
                "C: with scales, C enters the epilogue: give epilogue='f32' or 'rounded'"
            )
    if kind == "block":
        if cfg.promote_every is not None:
            raise ValueError(
                "promote_every: the block recipe promotes each 128-wide K group itself"
            )
        if opts.splits or opts.lead_first:
            raise ValueError("split_k: not modelled together with block scales")
        if _recipes.GROUP % k:
            raise ValueError(
                f"scale_a: block scales need an instruction k dividing 128, got {ins.text}"
            )
    if opts.splits:
        _split.slices(opts.split_rule, K, opts.split_k, opts.k_tile or k)  # its errors


def validate(
    instruction,
    arch=None,
    promote_every=None,
    executor="auto",
    grad_instruction=None,
    dgrad_instruction=None,
    wgrad_instruction=None,
    quantize=None,
    check=None,
    **kernel,
) -> tuple[Config, _options.KernelOptions | None]:
    """The one validator of a GEMM's configuration (the fields of :class:`GemmOptions`):
    its :class:`Config` and kernel options (None when all are at their defaults)."""
    cfg = config(
        instruction, arch, promote_every, grad_instruction, executor, dgrad_instruction,
        wgrad_instruction,
    )  # fmt: skip
    check_flag(cfg.ins, check)
    check_quantize(cfg.ins, quantize)
    refuse_option_forms(cfg.ins, kernel)
    opts = _options.kernel_options(cfg.ins, **kernel)
    refuse_combinations(cfg, opts)
    return cfg, opts


@dataclasses.dataclass(frozen=True)
class GemmOptions:
    """The configuration of one :func:`jaxmma.matmul` / :func:`jaxmma.dot_general` call.

    Frozen and hashable (a ``jax.jit`` static argument); ``dataclasses.replace`` makes a
    changed copy. Every field is the ``matmul`` keyword of the same name, with the same
    default and meaning, validated when the object is built by the rules ``matmul``
    applies (a ``TypeError`` or ``ValueError`` naming the field); the arrays of a call
    (``A``, ``B``, ``C``, ``scale_a``, ``scale_b``, ``key``) are not options.
    ``matmul(A, B, options=opts)`` computes what the keywords would, bit for bit; a
    keyword given beside ``options`` must agree with its field.

    Fields:
      instruction: PTX text of a form with a matrix product, or a
        :class:`jaxmma.Instruction`.
      arch: the architecture whose arithmetic is emulated (None: the instruction's own;
        for text, the newest that runs the form, with a :class:`jaxmma.DefaultArchWarning`
        at the call).
      promote_every: k-steps between promotions into an f32 total (None: none).
      executor: ``"auto"``, ``"native"`` or ``"emulate"``.
      grad_instruction, dgrad_instruction, wgrad_instruction: the instructions of the
        backward GEMMs (None: exact).
      split_k, k_tile, split_rule, split_reduce: split-K as library kernels run it.
      input_rounding: ``"rn"``, ``"rna"``, ``"rz"`` or ``"stochastic"`` (the call then
        takes ``key=``); None: the element dtype's own rule.
      epilogue, alpha, beta, out_dtype: where C enters and how the result reaches the
        output type.
      convert_inputs: ``"f16"``: fp8 inputs converted exactly for an f16 instruction.
      pad_k: K extended with +0 elements to this length before the split (XLA:GPU's K
        padding).
      quantize: block-scaled forms: ``quantize(x, axis=...)`` for float A and B.
      check: sparse forms: check a traced A's structure when the program runs.

    Raises:
      TypeError, ValueError: a field ``matmul`` would refuse, named; an unhashable field.

    Example:
      >>> import dataclasses, jax.numpy as jnp, jaxmma
      >>> opts = jaxmma.GemmOptions("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
      ...                           arch="sm_90", out_dtype=jnp.bfloat16)
      >>> A = jnp.ones((16, 64), jnp.bfloat16); B = jnp.ones((64, 8), jnp.bfloat16)
      >>> D = jaxmma.matmul(A, B, options=opts)
      >>> D.dtype, float(D[0, 0])
      (dtype(bfloat16), 64.0)
      >>> dataclasses.replace(opts, split_k=2).split_k
      2
    """

    instruction: str | Instruction
    _: dataclasses.KW_ONLY
    arch: str | None = None
    promote_every: int | None = None
    executor: str = "auto"
    grad_instruction: str | Instruction | None = None
    dgrad_instruction: str | Instruction | None = None
    wgrad_instruction: str | Instruction | None = None
    split_k: int | None = None
    k_tile: int | None = None
    split_rule: str | None = None
    split_reduce: str | tuple[Any, Any] | None = None
    input_rounding: str | None = None
    epilogue: str | None = None
    alpha: float | None = None
    beta: float | None = None
    out_dtype: DTypeLike | None = None
    convert_inputs: str | None = None
    pad_k: int | None = None
    quantize: Callable[..., Any] | None = None
    check: bool | None = None

    def __post_init__(self) -> None:
        fields = self.fields()
        validate(**fields)
        for name, value in fields.items():
            try:
                hash(value)
            except TypeError:
                raise TypeError(
                    f"{name}: expected a hashable value (GemmOptions is a jit static "
                    f"argument), got {type(value).__name__}"
                ) from None

    def fields(self) -> dict[str, Any]:
        """The fields by name: the ``matmul`` keywords they stand for."""
        return {name: getattr(self, name) for name in FIELDS}


#: the fields of GemmOptions, each a matmul keyword, and their defaults
FIELDS = tuple(f.name for f in dataclasses.fields(GemmOptions))
DEFAULTS = {f.name: f.default for f in dataclasses.fields(GemmOptions) if f.name != "instruction"}


def _agree(a, b) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # arrays where a value belongs: not the same option
        return False


def merge(options: GemmOptions | None, given: dict[str, Any], rounding=None) -> dict[str, Any]:
    """The fields of one call: ``options``' fields (None: the defaults) and the keywords
    ``given`` beside them (a subset of :data:`FIELDS`; ``rounding`` is the alias of
    ``input_rounding``). A keyword away from its default that differs from the options'
    field is a ``ValueError`` naming both."""
    if rounding is not None:
        ir = given.get("input_rounding")
        if ir is not None and not _agree(ir, rounding):
            raise ValueError(
                f"rounding: the same option as input_rounding; got rounding={rounding!r} "
                f"and input_rounding={ir!r} (give one)"
            )
        given = {**given, "input_rounding": rounding}
    if options is None:
        if given.get("instruction") is None:
            raise TypeError(
                "instruction: required: PTX text or a jaxmma.Instruction (or "
                "options=jaxmma.GemmOptions(instruction, ...))"
            )
        return {**DEFAULTS, **given}
    if not isinstance(options, GemmOptions):
        raise TypeError(f"options: expected None or a jaxmma.GemmOptions, got {options!r}"[:300])
    fields = options.fields()
    for name, value in given.items():
        default = None if name == "instruction" else DEFAULTS[name]
        if value is default or _agree(value, fields[name]):
            continue
        shown = "rounding" if name == "input_rounding" and value is rounding else name
        raise ValueError(
            f"options, {shown}: options.{name}={fields[name]!r} and {shown}={value!r} "
            f"differ; give {name} in one place (dataclasses.replace(options, {name}=...) "
            "makes a changed copy)"
        )
    return fields
