"""Compile once, call many times: the product instructions' entry points under ``jax.jit``.

Called without ``jit`` (as a notebook does), a JAX function runs op by op, each op a
dispatch of its own; the emulation has thousands of them. :func:`call` runs an
instruction's register-level or matrix-level product through one ``jax.jit`` cached per
instruction, Python-scalar keyword arguments and input shapes, so an eager call costs
about what a jitted one does after the first. Inside a trace (``jit``, ``vmap``, ``grad``)
the cached function simply inlines.

Calls whose meaning depends on concrete values stay eager, exactly as before: Python
lists or ints as operands (checked for range before they become arrays), arrays whose
dtype JAX would change on the way in (float64 without x64) and non-array operands such as
:class:`jaxmma.quant.Quantized`.

The sparse forms check concrete operands (the structure of A, the metadata) and raise a
``ValueError`` where a traced call would poison rows or decode to the hardware's choice.
An eager sparse call with array operands and static options runs as one program traced
under :func:`jaxmma.operands._sparse.as_concrete`, which makes every check decide as for
concrete inputs and return its verdict with the result (no host callback); where a check
found a bad value, the call is rerun op by op, which raises that ``ValueError`` with its
message. A call that passes its checks gives the op-by-op call's bits (the checks found
nothing: no row is poisoned), in one compilation instead of hundreds.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import bits, operands, util

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


#: keyword arguments of the sparse forms that are array data (every other one is static)
_SPARSE_ARRAYS = frozenset({"scale_a", "scale_b", "metadata"})


@functools.partial(util.jit, static_argnums=(0, 1, 2))
def _run(ins, entry: str, static_kw: tuple, args: tuple, array_kw: dict):
    fn = getattr(ins._implementation(), entry)
    return fn(ins, *args, **dict(static_kw), **array_kw)


@functools.partial(util.jit, static_argnums=(0, 1, 2, 3))
def _run_as_concrete(ins, entry: str, static_kw: tuple, default_check: bool, args, array_kw):
    """The call and whether any of its checks found a bad value."""
    with operands.sparse_as_concrete(default_check) as flags:
        fn = getattr(ins._implementation(), entry)
        out = fn(ins, *args, **dict(static_kw), **array_kw)
    return out, jnp.any(jnp.stack(flags)) if flags else jnp.zeros((), bool)


def call(ins, entry: str, args: tuple, kwargs: dict):
    """``ins._implementation().<entry>(ins, *args, **kwargs)``, compiled once per
    configuration where the arguments allow (see the module docstring)."""
    fn = getattr(ins._implementation(), entry)
    names = _OPERAND_NAMES.get(entry, ())
    for i, a in enumerate(args):
        bits.check_numeric(a, names[i] if i < len(names) else f"argument {i}")
    for k, v in kwargs.items():
        bits.check_numeric(v, k)
    array_kw = {k: v for k, v in kwargs.items() if not _static(v)}
    static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if _static(v)))
    arrays = all(_array_kept(a) for a in (*args, *array_kw.values()) if a is not None)
    if ins.sparse is not None:
        traced = util.is_traced(*args, *array_kw.values())  # inside jit/vmap/grad
        if not arrays or not set(array_kw) <= _SPARSE_ARRAYS or traced:
            return fn(ins, *args, **kwargs)
        try:
            out, failed = _run_as_concrete(
                ins, entry, static_kw, operands.sparse_is_checked(), tuple(args), array_kw
            )
        except jax.errors.UnexpectedTracerError:  # a check inside an inner transformation
            return fn(ins, *args, **kwargs)
        if bool(failed):  # a check found a bad value: op by op, the call raises
            return fn(ins, *args, **kwargs)
        return out
    if kwargs.get("check") not in (None, False) or not arrays:
        return fn(ins, *args, **kwargs)
    return _run(ins, entry, static_kw, tuple(args), array_kw)
