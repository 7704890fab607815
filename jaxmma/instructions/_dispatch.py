"""Compile once, call many times: the product instructions' entry points under ``jax.jit``.

Called without ``jit`` (as a notebook does), a JAX function runs op by op, each op a
dispatch of its own; the emulation has thousands of them. :func:`call` runs an
instruction's register-level or matrix-level product through one ``jax.jit`` cached per
instruction, Python-scalar keyword arguments and input shapes, so an eager call costs
about what a jitted one does after the first. Inside a trace (``jit``, ``vmap``, ``grad``)
the cached function simply inlines.

Calls whose meaning depends on concrete values stay eager, exactly as before: Python
lists or ints as operands (checked for range before they become arrays), arrays whose
dtype JAX would change on the way in (float64 without x64), non-array operands such as
:class:`jaxmma.quant.Quantized`, ``check=`` requests and the sparse forms (they inspect
concrete values: the structure of A, the metadata).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from ..bits import _values

#: the names errors give the positional operands of each entry point
_OPERAND_NAMES = {"execute": ("a", "b", "c", "e"), "matrix_mma": ("A", "B", "C")}


def _array_kept(x) -> bool:
    """An array that enters ``jit`` with its dtype unchanged."""
    if isinstance(x, jax.Array):
        return True
    if isinstance(x, np.ndarray):
        return jax.dtypes.canonicalize_dtype(x.dtype) == x.dtype
    return False


def _static(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _run(ins, entry: str, static_kw: tuple, args: tuple, array_kw: dict):
    fn = getattr(ins._implementation(), entry)
    return fn(ins, *args, **dict(static_kw), **array_kw)


def call(ins, entry: str, args: tuple, kwargs: dict):
    """``ins._implementation().<entry>(ins, *args, **kwargs)``, compiled once per
    configuration where the arguments allow (see the module docstring)."""
    fn = getattr(ins._implementation(), entry)
    names = _OPERAND_NAMES.get(entry, ())
    for i, a in enumerate(args):
        _values.check_numeric(a, names[i] if i < len(names) else f"argument {i}")
    for k, v in kwargs.items():
        _values.check_numeric(v, k)
    eager = (
        ins.sparse is not None  # the structure of a concrete A / metadata is checked eagerly
        or kwargs.get("check") not in (None, False)
        or not all(_array_kept(a) for a in args if a is not None)
    )
    array_kw = {k: v for k, v in kwargs.items() if not _static(v)}
    if eager or not all(_array_kept(v) for v in array_kw.values()):
        return fn(ins, *args, **kwargs)
    static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if _static(v)))
    return _run(ins, entry, static_kw, tuple(args), array_kw)
