"""Floor 1: element formats (``_formats``), multi-limb integers and output formats
(``_wide``), sub-word packing (``_packing``), element values <-> raw bits (``_values``),
the one float64 rule (``_doubles``).

What other floors may use is re-exported below; they import it from ``jaxmma.bits``,
never from the modules (``tests/test_layers.py`` checks it). The registry of the formats
is part of it: the other floors read format names, widths, families, dtypes and canonical
NaNs from here and write none of them again (``tests/test_registry.py`` checks it).
``DTYPES`` maps a format to the dtype of exactly its values; ``ELEMENT_DTYPES`` to the
dtype a matrix of its elements is given in (tf32 as float32); ``F32_FORMAT`` is the f32
output format of the wide integers.
"""

from ._doubles import ROUNDINGS as ROUNDINGS
from ._doubles import exact_float32 as exact_float32
from ._doubles import is_host_double as is_host_double
from ._doubles import nearest_float32 as nearest_float32
from ._doubles import prepare as prepare
from ._formats import DTYPES as DTYPES
from ._formats import F8F6F4 as F8F6F4
from ._formats import FORMAT_OF_DTYPE as FORMAT_OF_DTYPE
from ._formats import FORMATS as FORMATS
from ._formats import FP8 as FP8
from ._formats import SCALE_DTYPES as SCALE_DTYPES
from ._formats import Fields as Fields
from ._formats import Format as Format
from ._formats import decode as decode
from ._formats import encode as encode
from ._formats import fields as fields
from ._formats import get_format as get_format
from ._formats import round_float as round_float
from ._formats import round_to_format as round_to_format
from ._formats import special_bits as special_bits
from ._packing import bits_from_container as bits_from_container
from ._packing import container_from_bits as container_from_bits
from ._packing import from_container as from_container
from ._packing import pack as pack
from ._packing import to_container as to_container
from ._packing import unpack as unpack
from ._values import DTYPES as ELEMENT_DTYPES
from ._values import check_array_like as check_array_like
from ._values import check_numeric as check_numeric
from ._values import container_bits as container_bits
from ._values import from_bits as from_bits
from ._values import registers as registers
from ._values import to_bits as to_bits
from ._wide import CANONICAL_NAN as CANONICAL_NAN
from ._wide import F32 as F32_FORMAT
from ._wide import OUT_FORMATS as OUT_FORMATS
from ._wide import FloatFormat as FloatFormat
from ._wide import align as align
from ._wide import limbs_needed as limbs_needed
from ._wide import msb as msb
from ._wide import round_to_float as round_to_float
from ._wide import signed_sum as signed_sum

__all__ = [
    "CANONICAL_NAN",
    "DTYPES",
    "ELEMENT_DTYPES",
    "F32_FORMAT",
    "F8F6F4",
    "FORMATS",
    "FORMAT_OF_DTYPE",
    "FP8",
    "Fields",
    "FloatFormat",
    "Format",
    "OUT_FORMATS",
    "ROUNDINGS",
    "SCALE_DTYPES",
    "align",
    "bits_from_container",
    "check_array_like",
    "check_numeric",
    "container_bits",
    "container_from_bits",
    "decode",
    "encode",
    "special_bits",
    "exact_float32",
    "fields",
    "from_bits",
    "from_container",
    "get_format",
    "is_host_double",
    "limbs_needed",
    "msb",
    "nearest_float32",
    "pack",
    "prepare",
    "registers",
    "round_float",
    "round_to_float",
    "round_to_format",
    "signed_sum",
    "to_bits",
    "to_container",
    "unpack",
]
