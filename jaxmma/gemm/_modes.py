"""The module-level executor switches (``MODE``) of the GEMM layer, set for a block."""

from __future__ import annotations

import contextlib

import jax


@contextlib.contextmanager
def switched(module, mode: str):
    """``module.MODE = mode`` inside the block (one of ``module.MODES``, else a
    ``ValueError``), JAX's caches of traced functions cleared on entry and exit, so that a
    function traced under one mode is traced again under the other."""
    if mode not in module.MODES:
        raise ValueError(f"mode: expected one of {', '.join(module.MODES)}, got {mode!r}")
    old, module.MODE = module.MODE, mode
    jax.clear_caches()
    try:
        yield
    finally:
        module.MODE = old
        jax.clear_caches()
