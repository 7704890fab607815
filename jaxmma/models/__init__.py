"""Floor 3, which arithmetic each form uses on each architecture: the table of model
parameters (``_table``), chaining along k on either engine (``_chain``), the block-scaled
sums (``_scaled``), ``wgmma`` (``_wgmma``), and the one entry point ``_models.mma_bits``."""
