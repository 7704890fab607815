"""XLA:CPU compile options that make the emulation faster on the CPU it runs on.

XLA:CPU vectorizes its loops for 256-bit registers unless told otherwise
(``xla_cpu_prefer_vector_width``, default 256), even where the CPU has 512-bit AVX-512
registers. The emulation's element-wise programs (the per-product sums of the
block-scaled forms above all) are bound by the number of vector instructions, so on a
CPU that executes 512-bit instructions at full width they run faster with 512
(``benchmarks/RESULTS.md``: NVFP4 and MXFP8 GEMMs 1.3-2x faster on an AMD EPYC with
AVX-512).

The option changes how XLA vectorizes, not what it computes: the emulated GEMMs give
the same bits with it (``tests/test_cpu_options.py``: bf16, fp8 and block-scaled
``matmul``s). Float sums that XLA itself orders may be vectorized in another order, as
with any change of XLA's flags: ``jnp.sum`` of float32 in the caller's code, and the
sums over broadcast batch dimensions in the derivatives of jaxmma's GEMMs (as in
``jnp.matmul``'s).
"""

from __future__ import annotations

import functools

#: the option, where the CPU has AVX-512 (its foundation instructions, ``avx512f``)
AVX512 = {"xla_cpu_prefer_vector_width": 512}


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in ``/proc/cpuinfo`` (empty
    elsewhere, or where the file cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_compiler_options() -> dict[str, int]:
    """XLA compile options for CPU programs that call jaxmma, for
    ``jax.jit(f, compiler_options=jaxmma.cpu_compiler_options())``.

    Where the CPU has AVX-512: ``{"xla_cpu_prefer_vector_width": 512}`` (XLA:CPU's
    default is 256). Elsewhere, or where the CPU's features cannot be read (only Linux's
    ``/proc/cpuinfo`` is read): ``{}``. The bits of the emulated GEMMs do not depend on
    them (float sums XLA orders itself may: see the module's docstring); the speed does
    (measured on an AMD EPYC with AVX-512: MXFP8 at 1024^3 1.4x faster; on CPUs that
    split 512-bit instructions in two, expect less). A GPU backend ignores the option.

    Example (any jitted function that calls jaxmma; here a one-line GEMM):
      >>> import jax, jax.numpy as jnp, jaxmma
      >>> mm = lambda a, b: jaxmma.matmul(
      ...     a, b, instruction="mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
      >>> f = jax.jit(mm, compiler_options=jaxmma.cpu_compiler_options())
      >>> f(jnp.ones((16, 16)), jnp.full((16, 8), 0.5))[0, :2].tolist()
      [8.0, 8.0]
    """
    return dict(AVX512) if "avx512f" in _cpu_flags() else {}
