"""Structured sparsity for ``mma.sp``: prune, compress, decompress, validate (9.7.14.6)."""

from ._sparse import checked as checked
from ._sparse import compress as compress
from ._sparse import decompress as decompress
from ._sparse import is_checked as is_checked
from ._sparse import metadata_indices as metadata_indices
from ._sparse import prune as prune
from ._sparse import validate as validate

__all__ = [
    "checked",
    "compress",
    "decompress",
    "is_checked",
    "metadata_indices",
    "prune",
    "validate",
]
