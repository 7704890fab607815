"""Floor 1: element formats (``_formats``), multi-limb integers and output formats
(``_wide``), sub-word packing (``_packing``), element values <-> raw bits (``_values``).

The registry of the formats is re-exported below: the other floors read format names,
widths, families, dtypes and canonical NaNs from ``jaxmma.bits`` and write none of them
again (``tests/test_registry.py`` checks it).
"""

from ._formats import DTYPES as DTYPES
from ._formats import F8F6F4 as F8F6F4
from ._formats import FORMAT_OF_DTYPE as FORMAT_OF_DTYPE
from ._formats import FORMATS as FORMATS
from ._formats import FP8 as FP8
from ._formats import SCALE_DTYPES as SCALE_DTYPES
from ._formats import Format as Format
from ._formats import get_format as get_format
from ._wide import CANONICAL_NAN as CANONICAL_NAN
from ._wide import OUT_FORMATS as OUT_FORMATS
from ._wide import FloatFormat as FloatFormat

__all__ = [
    "CANONICAL_NAN",
    "DTYPES",
    "F8F6F4",
    "FORMATS",
    "FORMAT_OF_DTYPE",
    "FP8",
    "OUT_FORMATS",
    "SCALE_DTYPES",
    "FloatFormat",
    "Format",
    "get_format",
]
