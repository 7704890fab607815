"""Run-time checks of traced values (checked modes of ``mma.sp`` and the memory images).

Concrete inputs are checked in Python and raise at once; traced inputs (under ``jit`` or
``vmap``) can only be checked by :func:`jax.experimental.checkify.check`, which needs
the traced function to be wrapped in :func:`jax.experimental.checkify.checkify`.
:func:`traced_check` says so in our words when it is not.
"""

from __future__ import annotations

import jax
from jax.experimental import checkify

#: Appended to dtype errors of .f64 operands when 64-bit types are off.
X64_HINT = (
    "; .f64 operands are uint64/float64, which need 64-bit types: call "
    'jax.config.update("jax_enable_x64", True) before creating them'
)

HOW = (
    "wrap the jitted function in jax.experimental.checkify.checkify and call "
    "err.throw() on the error it returns (err, out = checkify.checkify(jax.jit(f))(...)), "
    "or call it outside jit with concrete inputs (or, where the call has one, pass "
    "check=False)"
)


def is_traced(*xs) -> bool:
    """Whether any of ``xs`` is a tracer (its value is unknown when the program is built)."""
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def traced_check(ok, message: str, what: str, **fields) -> None:
    """:func:`checkify.check` of ``ok`` (a traced bool scalar), with a clear error when the
    caller stages it without ``checkify``.

    Args:
      ok: bool scalar, true when the input is valid.
      message: the ``checkify`` format string (``{name}`` fields from ``fields``).
      what: the check in words, for the error under plain ``jit`` (e.g. ``"sparse
        check=True"``).
    """
    try:
        checkify.check(ok, message, **fields)
    except ValueError as err:
        if "functionaliz" not in str(err):
            raise
        raise ValueError(
            f"{what} on traced inputs (under jit) reports errors through "
            f"jax.experimental.checkify: {HOW}"
        ) from None


def x64_hint() -> str:
    """:data:`X64_HINT` when 64-bit types are off, else ``""``."""
    return "" if jax.config.jax_enable_x64 else X64_HINT
