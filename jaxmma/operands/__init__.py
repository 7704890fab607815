"""Floor 4, operand preparation: per-lane layouts (``_layouts``), fragments
(``_fragments``), memory images (``_memory``), scale selection (``_scaling``), MX / NVFP4
quantization (``_quant``), sparse metadata (``_sparse``), GEMM operands (``_operands``)."""
