"""The executor interface: one way to compute a GEMM's instruction chain.

An executor computes the instruction chain of one GEMM on raw bits: ``A [..., M, K]``,
``B [..., K, N]`` and ``C [..., M, N]`` in, D bits out, leading dimensions broadcast,
any K (padded as a kernel pads it). Every executor gives the same bits; they differ in
speed and in what they cover. Each is a subclass of :class:`Executor` in its own module
(``_native.Native``, ``_pallas.Pallas``, ``_block_scaled.BlockScaled``, ``_chain.Xla``);
:mod:`._executors` holds their order and the one place that chooses.
"""

from __future__ import annotations

import jax


class Executor:
    """One way to compute a GEMM's instruction chain, and the stages it fuses.

    Attributes:
      name: how docs and errors call it.
      reads_no_c: whether :meth:`chain` takes ``C=None`` itself (a kernel that reads no
        C; otherwise :func:`jaxmma.gemm._executors.gemm_bits` passes +0).
    """

    name: str = ""
    reads_no_c: bool = False

    def covers(self, cfg, scales: tuple | None) -> bool:
        """Whether it computes this configuration (``scales``: the block-scaled forms'
        ``(SA, SB)``, else None)."""
        raise NotImplementedError

    def chain(self, cfg, A, B, C, scales) -> jax.Array:
        """D bits in the accumulator's format; ``C`` None is +0 (given only where
        :attr:`reads_no_c`)."""
        raise NotImplementedError

    def fuses(self, stage: str) -> bool:
        """Whether it runs that stage in its kernel (``"tensor"`` / ``"row"`` scales:
        :meth:`scaled`, ``"block"``: :meth:`block`); none by default."""
        return False

    def scaled(self, cfg, A, B, C, factors) -> jax.Array:
        """f32 bits: the chain times the scale factors, where it :meth:`fuses` them."""
        raise NotImplementedError(f"the {self.name} executor fuses no scales")

    def block(self, cfg, A, B, SA, SB) -> jax.Array:
        """f32 bits: the 128-wide block-scale recipe, where it :meth:`fuses` it."""
        raise NotImplementedError(f"the {self.name} executor fuses no block recipe")
