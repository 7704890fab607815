"""Floor 6, the GEMM layer: configuration, the XLA executor, autodiff wiring and the
public ``matmul`` / ``dot_general`` (``_gemm``); the Pallas GPU executor (``_pallas``)."""
