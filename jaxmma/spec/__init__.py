"""Floor 0: the one table of the spec's forms (``_spec``), the PTX parser (``_ptx``) and
the type of what lower floors read of an instruction (``_view``).

What other floors may use is re-exported below; they import it from ``jaxmma.spec``,
never from the modules (``tests/test_layers.py`` checks it). The instruction
descriptor's codec is offered as ``idesc_decode`` / ``idesc_encode``.
"""

from ._idesc import decode as idesc_decode
from ._idesc import encode as idesc_encode
from ._ptx import Operand as Operand
from ._ptx import canonical_text as canonical_text
from ._ptx import default_arch as default_arch
from ._ptx import operands as operands
from ._ptx import parse as parse
from ._ptx import parse_arch as parse_arch
from ._ptx import runs_on as runs_on
from ._ptx import shown as shown
from ._spec import F8 as F8
from ._spec import F8F6F4 as F8F6F4
from ._spec import FORMS as FORMS
from ._spec import OPCODES as OPCODES
from ._spec import TCGEN05_K as TCGEN05_K
from ._spec import Form as Form
from ._spec import forms as forms
from ._view import InstructionView as InstructionView

__all__ = [
    "F8",
    "F8F6F4",
    "FORMS",
    "Form",
    "InstructionView",
    "OPCODES",
    "Operand",
    "TCGEN05_K",
    "canonical_text",
    "default_arch",
    "forms",
    "idesc_decode",
    "idesc_encode",
    "operands",
    "parse",
    "parse_arch",
    "runs_on",
    "shown",
]
