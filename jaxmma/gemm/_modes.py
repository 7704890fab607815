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


def kernel_run(mode: str, never: str) -> str | None:
    """How a Pallas kernel whose ``MODE`` is ``mode`` runs a covered GEMM now: None where
    ``mode`` is ``never`` (the module's name for "not the kernel"), or ``"auto"`` off a
    GPU; ``"interpret"`` where asked, or where the kernel is forced off a GPU;
    ``"compiled"`` otherwise."""
    on_gpu = jax.default_backend() == "gpu"
    if mode == never or (mode == "auto" and not on_gpu):
        return None
    if mode == "interpret" or not on_gpu:
        return "interpret"
    return "compiled"
