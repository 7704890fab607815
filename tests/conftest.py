"""Strict JAX configuration for the whole suite (equinox / lineax style)."""

import os

# Faster XLA:CPU compilation for the many small programs the suite builds; results are
# bit-identical (integer arithmetic only).
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
)

import jax  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
