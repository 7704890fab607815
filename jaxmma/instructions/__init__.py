"""Floor 5, the register and matrix level: the ``Instruction`` object, ``mma`` / ``mma.sp``
/ block scale (``_mma``), ``wmma``, ``ldmatrix`` / ``stmatrix`` / ``movmatrix``
(``_movement``), ``wgmma`` (``_wgmma``), compiled-once dispatch (``_dispatch``).

What other floors may use is re-exported below; they import it from
``jaxmma.instructions``, never from the modules (``tests/test_layers.py`` checks it).
"""

from ._instruction import Instruction as Instruction
from ._instruction import all_instructions as all_instructions
from ._instruction import instruction as instruction
from ._instruction import tcgen05_instruction as tcgen05_instruction
from ._movement import layout as movement_layout
from ._wmma import operand_layout as wmma_operand_layout

__all__ = [
    "Instruction",
    "all_instructions",
    "instruction",
    "movement_layout",
    "tcgen05_instruction",
    "wmma_operand_layout",
]
