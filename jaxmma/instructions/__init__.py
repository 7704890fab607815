"""Floor 5, the register and matrix level: the ``Instruction`` object, ``mma`` / ``mma.sp``
/ block scale (``_mma``), ``wmma``, ``ldmatrix`` / ``stmatrix`` / ``movmatrix``
(``_movement``), ``wgmma`` (``_wgmma``), compiled-once dispatch (``_dispatch``)."""
