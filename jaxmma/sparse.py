"""Structured sparsity for ``mma.sp`` (9.7.14.6) and ``tcgen05.mma.sp`` (9.7.16.10.8): prune,
compress, decompress, validate (docs/tcgen05.md for the metadata matrix of tcgen05)."""

from .operands._sparse import checked as checked
from .operands._sparse import compress as compress
from .operands._sparse import decompress as decompress
from .operands._sparse import is_checked as is_checked
from .operands._sparse import metadata_indices as metadata_indices
from .operands._sparse import prune as prune
from .operands._sparse import validate as validate

__all__ = [
    "checked",
    "compress",
    "decompress",
    "is_checked",
    "metadata_indices",
    "prune",
    "validate",
]
