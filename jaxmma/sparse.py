"""Structured sparsity for ``mma.sp`` (9.7.14.6) and ``tcgen05.mma.sp`` (9.7.16.10.8): prune,
compress, decompress, validate (docs/tcgen05.md for the metadata matrix of tcgen05)."""

from .operands import compress as compress
from .operands import decompress as decompress
from .operands import metadata_indices as metadata_indices
from .operands import prune as prune
from .operands import sparse_checked as checked
from .operands import sparse_is_checked as is_checked
from .operands import validate_sparse as validate

__all__ = [
    "checked",
    "compress",
    "decompress",
    "is_checked",
    "metadata_indices",
    "prune",
    "validate",
]
