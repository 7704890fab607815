"""Floor 8, policies on top of the GEMM and training floors: the targets a dot can run
on (``_targets``), rules and the dots they match (``_rules``), the jaxpr evaluation that
replaces a function's dots (``_evaluate``), the state and keys its dots take
(``_state``) and the named presets (``_presets``)."""
