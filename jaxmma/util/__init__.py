"""Floor 0, helpers every floor may use: errors of traced values (``_errors``), batch
shapes (``_shapes``), custom derivatives (``_grad``, ``_ste``), jaxpr walks
(``_jaxpr``), the work-arounds of XLA faults (``_xla``). Imports nothing of jaxmma."""
