"""Floor 2, the kernel-neutral arithmetic core: the general fused-block engine
(``_numerics``), the fixed-width engine (``_fixed``), int32 rounding and IEEE adds shared by
every executor (``_int32``), integer and b1 sums (``_integer``), the f64 fma chain
(``_float64``). Knows nothing of instructions, tiles or kernels."""
