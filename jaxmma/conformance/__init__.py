"""Hardware conformance harness: ``python -m jaxmma.conformance`` (see ``__main__``).

GPU-free pieces are importable here; CuPy is imported only by ``_gpu`` when a run needs it.
"""

from ._compare import Result as Result
from ._compare import compare as compare
from ._golden import Record as Record
from ._golden import load_golden as load_golden
from ._golden import regenerate_inputs as regenerate_inputs
from ._vectors import Vectors as Vectors
from ._vectors import inputs as inputs

__all__ = ["Record", "Result", "Vectors", "compare", "inputs", "load_golden", "regenerate_inputs"]
