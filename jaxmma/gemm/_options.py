"""Kernel options of ``matmul`` / ``dot_general``: what a library kernel adds to the chain.

One frozen, hashable :class:`KernelOptions` (a ``jit`` static argument) holds them,
validated once at trace time with the argument named in every error:

* split-K (``split_k``, ``k_tile``, ``split_rule``, ``split_reduce``): K cut into slices,
  each chained from +0, the f32 partials reduced (:mod:`._split`);
* ``input_rounding``: how float inputs are rounded to the element type (``"rna"``: ties
  away from zero, as XLA:GPU's Triton GEMMs round f32 to tf32);
* ``convert_inputs="f16"``: fp8 inputs converted exactly to f16 for an f16 instruction
  (Triton's ``mma.sync`` path for fp8 on sm_90, docs/xla_gpu.md);
* ``pad_k``: K extended with +0 elements to ``pad_k`` before it is cut into slices (XLA:GPU
  pads a dot's K to a multiple of its split, docs/xla_gpu.md);
* the epilogue (``epilogue``, ``alpha``, ``beta``, ``out_dtype``): where C enters and with
  which roundings the result reaches the output type (:mod:`._epilogue`).

The facts behind each rule are in ``docs/gemm.md`` (measured on an H100).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..bits import DTYPES, F8F6F4

#: how K is cut into slices (docs/gemm.md, "Split-K")
SPLIT_RULES = ("cublas", "cutlass", "xla")
#: orders in which the f32 partials are added (a nested tuple of slice indices also works)
REDUCES = ("sequential", "halving")
INPUT_ROUNDINGS = ("rn", "rna", "rz", "stochastic")
#: where C enters: None (the chain's start), "f32" (one f32 epilogue), "rounded" (the
#: accumulator rounded to the output type first, then C added in f32 and rounded again)
EPILOGUES = (None, "f32", "rounded")
#: output dtype name -> output format
OUT_DTYPES = {DTYPES[fmt].name: fmt for fmt in ("f32", "bf16", "f16")}


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """The kernel options of one GEMM (see :func:`jaxmma.matmul`)."""

    split_k: int = 1
    k_tile: int | None = None
    split_rule: str = "cublas"
    split_reduce: str | tuple = "sequential"
    input_rounding: str | None = None
    epilogue: str | None = None
    alpha: float | None = None
    beta: float | None = None
    out_dtype: str | None = None  # "f32", "bf16", "f16" or None (the accumulator's)
    convert_inputs: str | None = None  # "f16": fp8 inputs converted exactly to f16
    pad_k: int | None = None  # K extended with +0 elements to pad_k (XLA:GPU's K padding)

    @property
    def splits(self) -> bool:
        return self.split_k > 1

    @property
    def lead_first(self) -> bool:
        """One slice under the CUTLASS rule with a k tile: CUTLASS still runs the partial
        k-tile first (its elements, then +0s), with or without a split."""
        return self.split_k == 1 and self.split_rule == "cutlass" and self.k_tile is not None


def given(opts: KernelOptions) -> list[str]:
    """``name=value`` of every option of ``opts`` away from its default."""
    default = KernelOptions()
    return [
        f"{f.name}={getattr(opts, f.name)!r}"
        for f in dataclasses.fields(opts)
        if getattr(opts, f.name) != getattr(default, f.name)
    ]


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _tree_leaves(tree, S: int, path="split_reduce"):
    if _is_int(tree):
        return [int(tree)]
    if isinstance(tree, tuple) and len(tree) == 2:
        return _tree_leaves(tree[0], S) + _tree_leaves(tree[1], S)
    raise ValueError(
        f"{path}: expected 'sequential', 'halving' or a pairing tree of slice indices "
        f"(nested pairs such as ((0, 1), (2, 3))), got {tree!r}"
    )


def _plain(tree):
    """A checked pairing tree with NumPy ints made Python ints (hashable, indexable)."""
    return int(tree) if _is_int(tree) else (_plain(tree[0]), _plain(tree[1]))


def _scalar(name, x):
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected None or a Python float, got {type(x).__name__}")
    return float(np.float32(x))


def kernel_options(
    ins,
    *,
    split_k=None,
    k_tile=None,
    split_rule=None,
    split_reduce=None,
    input_rounding=None,
    epilogue=None,
    alpha=None,
    beta=None,
    out_dtype=None,
    convert_inputs=None,
    pad_k=None,
) -> KernelOptions | None:
    """Validated :class:`KernelOptions` for instruction ``ins``; None when every option
    is at its default (the GEMM then runs exactly as without options). Each option's
    own values are checked here; which forms and arguments options combine with is
    :mod:`._config`'s one rule (:func:`._config.refuse_option_forms`, called first)."""
    given = dict(
        split_k=split_k, k_tile=k_tile, split_rule=split_rule, split_reduce=split_reduce,
        input_rounding=input_rounding, epilogue=epilogue, alpha=alpha, beta=beta,
        out_dtype=out_dtype, convert_inputs=convert_inputs, pad_k=pad_k,
    )  # fmt: skip
    if all(v is None for v in given.values()):
        return None
    S = 1
    if split_k is not None:
        if not _is_int(split_k):
            raise TypeError(f"split_k: expected a positive int, got {split_k!r}")
        if split_k < 1:
            raise ValueError(f"split_k: expected a positive number of slices, got {split_k}")
        S = int(split_k)
    if k_tile is not None:
        if not _is_int(k_tile) or k_tile <= 0 or k_tile % ins.k:
            raise ValueError(
                f"k_tile: expected a positive multiple of the instruction's k = {ins.k} "
                f"({ins.text}), got {k_tile!r}"
            )
        k_tile = int(k_tile)
    rule = "cublas" if split_rule is None else split_rule
    if rule not in SPLIT_RULES:
        raise ValueError(f"split_rule: expected one of {list(SPLIT_RULES)}, got {split_rule!r}")
    red = "sequential" if split_reduce is None else split_reduce
    if not (isinstance(red, str) and red in REDUCES):
        if isinstance(red, str):
            raise ValueError(
                f"split_reduce: expected one of {list(REDUCES)} or a pairing tree, got {red!r}"
            )
        leaves = _tree_leaves(red, S)
        if sorted(leaves) != list(range(S)):
            raise ValueError(
                f"split_reduce: the tree must name each slice 0 .. {S - 1} once, got {red!r}"
            )
        red = _plain(red)
    if red == "halving" and S & (S - 1):
        raise ValueError(f"split_reduce: 'halving' needs a power-of-two split_k, got {S}")
    if input_rounding is not None:
        if input_rounding not in INPUT_ROUNDINGS:
            raise ValueError(
                f"input_rounding: expected None or one of {list(INPUT_ROUNDINGS)}, got "
                f"{input_rounding!r}"
            )
        if ins.atype not in ("f16", "bf16", "tf32", *F8F6F4):
            raise ValueError(
                f"input_rounding: only float element types are rounded; {ins.text} takes "
                f".{ins.atype} inputs"
            )
    if convert_inputs is not None:
        if convert_inputs != "f16":
            raise ValueError(f"convert_inputs: expected None or 'f16', got {convert_inputs!r}")
        if ins.atype != "f16" or ins.btype != "f16":
            raise ValueError(
                f"convert_inputs: 'f16' feeds fp8 inputs to an f16 instruction; {ins.text} "
                f"takes .{ins.atype} x .{ins.btype}"
            )
        if input_rounding is not None:
            raise ValueError(
                f"convert_inputs, input_rounding: the fp8 -> f16 conversion is exact; "
                f"input_rounding={input_rounding!r} contradicts it (give one of them)"
            )
    if pad_k is not None:
        if not _is_int(pad_k):
            raise TypeError(f"pad_k: expected None or a positive int, got {pad_k!r}")
        if pad_k < 1:
            raise ValueError(f"pad_k: expected a positive length of K, got {pad_k}")
        pad_k = int(pad_k)
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue: expected one of {list(EPILOGUES)}, got {epilogue!r}")
    if ins.dtype not in ("f32", "f16"):
        for name in ("split_k", "epilogue", "alpha", "beta", "out_dtype"):
            if given[name] is not None and not (name == "split_k" and S == 1):
                raise ValueError(
                    f"{name}: kernel epilogues and split-K are modelled for float "
                    f"accumulators; {ins.text} accumulates in .{ins.dtype}"
                )
    if S > 1 and ins.dtype != "f32":
        raise ValueError(
            f"split_k: the partials are reduced in f32; {ins.text} has .{ins.dtype} accumulators"
        )
    if (alpha is not None or beta is not None) and epilogue is None:
        raise ValueError(
            "alpha, beta: they scale the epilogue's terms; give epilogue='f32' or 'rounded'"
        )
    out = None
    if out_dtype is not None:
        try:
            name = jnp.dtype(out_dtype).name
        except TypeError:
            name = str(out_dtype)
        if name not in OUT_DTYPES:
            raise ValueError(
                f"out_dtype: expected one of {list(OUT_DTYPES)} or None, got {out_dtype!r}"
            )
        out = OUT_DTYPES[name]
    if epilogue == "rounded" and out is None:
        raise ValueError("epilogue: 'rounded' rounds to the output type; give out_dtype too")
    return KernelOptions(
        S, k_tile, rule, red, input_rounding, epilogue, _scalar("alpha", alpha),
        _scalar("beta", beta), out, convert_inputs, pad_k,
    )  # fmt: skip
