"""The public faces are annotated: every parameter and every return of each public
function, of each public class's methods and of :class:`jaxmma.Instruction`.

Read with ``inspect``, independent of the type checker that ``make lint`` runs
(``pyproject.toml``, ``[tool.mypy]``): a public callable that loses an annotation fails
here even where the checker is not installed.
"""

from __future__ import annotations

import inspect

import pytest

import jaxmma

MODULES = {
    "jaxmma": jaxmma,
    "formats": jaxmma.formats,
    "layouts": jaxmma.layouts,
    "policy": jaxmma.policy,
    "presets": jaxmma.presets,
    "quant": jaxmma.quant,
    "recipes": jaxmma.recipes,
    "sparse": jaxmma.sparse,
}
#: the flax-backed names of jaxmma.policy (imported on first use): checked where flax is
OPTIONAL = {("policy", "NnxModel"), ("policy", "NnxState")}


def _functions_of(cls: type):
    """The public methods (and ``__init__``, ``__call__``) a class defines itself."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__call__"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if inspect.isfunction(value):
            yield f"{cls.__name__}.{name}", value


def _public_callables():
    """``(qualified name, function)`` for every public function and method."""
    seen = set()
    for mod_name, mod in MODULES.items():
        for name in mod.__all__:
            if (mod_name, name) in OPTIONAL:
                try:
                    obj = getattr(mod, name)
                except ImportError:
                    continue
            else:
                obj = getattr(mod, name)
            if inspect.ismodule(obj):
                continue
            if isinstance(obj, type):
                items = list(_functions_of(obj))
            elif inspect.isfunction(obj):
                items = [(name, obj)]
            elif callable(obj):  # a callable value (a preset GEMM): its class's __call__
                items = [(f"{name}.__call__", type(obj).__call__)]
            else:  # a value (a table, a string)
                continue
            for qual, fn in items:
                if id(fn) not in seen:
                    seen.add(id(fn))
                    yield f"{mod_name}.{qual}", fn


def missing_annotations(fn) -> list[str]:
    """The parameters (``self`` and ``cls`` aside) and the return that lack one."""
    sig = inspect.signature(inspect.unwrap(fn))
    empty = inspect.Parameter.empty
    out = [
        p.name
        for i, p in enumerate(sig.parameters.values())
        if p.annotation is empty and not (i == 0 and p.name in ("self", "cls"))
    ]
    if sig.return_annotation is inspect.Signature.empty:
        out.append("return")
    return out


CALLABLES = dict(_public_callables())


def test_the_walk_sees_the_public_faces():
    for name in (
        "jaxmma.matmul",
        "jaxmma.dot_general",
        "jaxmma.instruction",
        "jaxmma.Instruction.mma",
        "jaxmma.Instruction.fragment",
        "formats.encode",
        "quant.quantize_mx",
        "sparse.compress",
        "layouts.operand_map",
        "recipes.Recipe.matmul",
        "jaxmma.with_policy",
        "policy.dots",
        "policy.Gemm.__call__",
    ):
        assert name in CALLABLES, f"{name}: not among the public callables walked"
    assert len(CALLABLES) > 60


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_public_callable_is_annotated(name):
    missing = missing_annotations(CALLABLES[name])
    assert not missing, f"{name}: no annotation on {', '.join(missing)}"


def test_the_check_sees_a_missing_annotation():
    def partly(a: int, b, *args, c: str = "", **kwargs: int):
        return a

    def whole(self, a: int, *args: int, **kwargs: str) -> None:
        return None

    assert missing_annotations(partly) == ["b", "args", "return"]
    assert missing_annotations(whole) == []


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
