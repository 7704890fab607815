"""Run-time checks of traced values (checked modes of ``mma.sp``, ``matmul`` and the memory
images); the x64 hint.

Concrete inputs are checked in Python and raise a ``ValueError`` at once. Traced inputs
(under ``jit``, ``vmap``, ``grad``, ``scan``) are known only when the compiled program
runs: :func:`raise_if` stages a host callback (:func:`jax.experimental.io_callback`,
unordered, so it survives dead-code elimination and works under ``vmap``) that raises
our ``ValueError`` with the same message the concrete check gives, naming the argument.
JAX reports an exception raised in a callback as a :class:`jax.errors.JaxRuntimeError`
whose text ends with ``ValueError: <our message>``; it needs no ``checkify`` wrapper.
Under ``vmap`` the callback runs once per mapped element, so the message names the
position inside one element.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

import jax
import numpy as np
from jax.experimental import io_callback

#: Appended to dtype errors of .f64 operands when 64-bit types are off.
X64_HINT = (
    "; .f64 operands are uint64/float64, which need 64-bit types: call "
    'jax.config.update("jax_enable_x64", True) before creating them'
)


def is_traced(*xs) -> bool:
    """Whether any of ``xs`` is a tracer (its value is unknown when the program is built)."""
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def first(bad) -> tuple[int, ...]:
    """The index tuple of the first true entry of the NumPy bool array ``bad``."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


#: the list of traced verdicts while checks are recorded (:func:`recording`), else None
_RECORD = contextvars.ContextVar("jaxmma_errors_record", default=None)


@contextlib.contextmanager
def recording():
    """Checks of traced values inside the block raise nothing: each appends its verdict
    (a traced bool scalar, true where a value is bad) to the list this yields, for the
    caller to return from its program and act on."""
    flags: list = []
    token = _RECORD.set(flags)
    try:
        yield flags
    finally:
        _RECORD.reset(token)


def raise_if(bad, message: Callable[..., str], **values) -> None:
    """Raise ``ValueError(message(pos, **values))`` where ``bad`` has a true entry.

    Args:
      bad: bool array, true where the input is invalid (concrete or traced).
      message: builds the error text from ``pos`` (:func:`first` of ``bad``) and the
        ``values`` as NumPy arrays; called only when something is wrong.
      values: arrays the message reads (concrete or traced), passed to the host with
        ``bad``.

    Concrete ``bad`` raises at once; a traced one stages an unordered
    :func:`jax.experimental.io_callback` that raises when the program runs (JAX reports
    it as a :class:`jax.errors.JaxRuntimeError` carrying our message).
    """
    if not is_traced(bad, *values.values()):
        b = np.asarray(bad)
        if b.any():
            raise ValueError(message(first(b), **{k: np.asarray(v) for k, v in values.items()}))
        return

    flags = _RECORD.get()
    if flags is not None:
        flags.append(jax.numpy.any(bad))
        return

    def host(bad, values):
        b = np.asarray(bad)
        if b.any():
            raise ValueError(message(first(b), **{k: np.asarray(v) for k, v in values.items()}))

    io_callback(host, None, bad, values, ordered=False)


def x64_hint() -> str:
    """:data:`X64_HINT` when 64-bit types are off, else ``""``."""
    return "" if jax.config.jax_enable_x64 else X64_HINT
