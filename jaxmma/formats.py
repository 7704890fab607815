"""Element formats of PTX ISA 9.7.14.2-3: decode, encode with every rounding, packing."""

from .bits import FORMATS as FORMATS
from .bits import Fields as Fields
from .bits import Format as Format
from .bits import bits_from_container as from_container
from .bits import container_from_bits as to_container
from .bits import decode as decode
from .bits import encode as encode
from .bits import fields as fields
from .bits import get_format as get_format
from .bits import pack as pack
from .bits import round_to_format as round_to_format
from .bits import unpack as unpack

__all__ = [
    "FORMATS",
    "Fields",
    "Format",
    "decode",
    "encode",
    "fields",
    "from_container",
    "get_format",
    "pack",
    "round_to_format",
    "to_container",
    "unpack",
]
