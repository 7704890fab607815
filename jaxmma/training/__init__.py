"""Floor 7, training recipes on top of the GEMM floor: scales and their state
(``_scales``), the fp8 and NVFP4 linear layers with their backward passes (``_fp8``,
``_nvfp4``), the recipes themselves (``_recipes``) and loss scaling (``_loss_scale``)."""
