"""The registry of the formats (``jaxmma.bits``): its facts against ml_dtypes and NumPy
(an oracle that shares no code with it), and the package read with ``ast`` for copies of
them written again outside the registry."""

import ast
import pathlib

import ml_dtypes
import numpy as np
import pytest

from jaxmma import bits, spec
from jaxmma.spec import _ptx

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxmma"
FILES = sorted(ROOT.rglob("*.py"))

#: ml_dtypes' and NumPy's names of the formats, written here from their documentation
ML_NAMES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "e3m2": "float6_e3m2fn",
    "e2m3": "float6_e2m3fn",
    "e2m1": "float4_e2m1fn",
    "ue8m0": "float8_e8m0fnu",
    "s8": "int8",
    "u8": "uint8",
    "s4": "int4",
    "u4": "uint4",
    "s32": "int32",
}


# ---- the facts --------------------------------------------------------------------------
def test_dtype_names_are_ml_dtypes_names():
    assert {n: d.name for n, d in bits.DTYPES.items()} == ML_NAMES
    assert bits.FORMAT_OF_DTYPE == {v: k for k, v in ML_NAMES.items()}


@pytest.mark.parametrize("fmt", sorted(n for n in ML_NAMES if bits.FORMATS[n].kind == "float"))
def test_float_widths_agree_with_ml_dtypes(fmt):
    f, info = bits.FORMATS[fmt], ml_dtypes.finfo(ML_NAMES[fmt])
    assert (f.bits, f.exp_bits, f.mant_bits) == (info.bits, info.nexp, info.nmant)
    assert (1 if f.subnormals else 0) - f.bias == info.minexp  # the smallest normal exponent
    assert f.max == float(info.max)
    assert bits.DTYPES[fmt].itemsize * 8 >= f.bits


@pytest.mark.parametrize("fmt", sorted(n for n in ML_NAMES if bits.FORMATS[n].kind == "int"))
def test_integer_widths_agree_with_ml_dtypes(fmt):
    f, info = bits.FORMATS[fmt], ml_dtypes.iinfo(ML_NAMES[fmt])
    assert (f.bits, f.signed, f.max) == (info.bits, info.min < 0, float(info.max))


def test_scale_dtypes():
    assert {n: d.name for n, d in bits.SCALE_DTYPES.items()} == {
        "ue8m0": "float8_e8m0fnu",
        "ue4m3": "float8_e4m3fn",  # the byte of a ue4m3 scale; its sign bit is ignored
    }


def test_the_families():
    # ml_dtypes' signed 8-bit floats, then its 6- and 4-bit ones
    fp8 = [n for n, d in ML_NAMES.items() if d.startswith("float8_") and ml_dtypes.finfo(d).min < 0]
    narrow = [n for n, d in ML_NAMES.items() if d.startswith(("float6_", "float4_"))]
    assert bits.FP8 == tuple(fp8) == ("e4m3", "e5m2")
    assert bits.F8F6F4 == (*fp8, *narrow) == ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
    # one tuple each: the spec's type lists, the same objects
    assert bits.FP8 is spec.F8 and bits.F8F6F4 is spec.F8F6F4


def test_the_spec_names_every_format():
    assert set(_ptx.ELEMENT_TYPES) | set(_ptx.SCALE_TYPES) == set(bits.FORMATS)


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_output_formats_and_canonical_nans(fmt):
    out, info = bits.OUT_FORMATS[fmt], ml_dtypes.finfo(ML_NAMES[fmt])
    assert (out.man, out.exp, out.nbits) == (info.nmant, info.nexp, info.bits)
    assert 1 - out.bias == info.minexp
    nan = bits.CANONICAL_NAN[fmt]
    assert nan == {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF}[fmt]
    width = np.dtype(f"uint{info.bits}")
    value = np.array(nan, width).view(ML_NAMES[fmt])
    assert np.isnan(value) and not np.signbit(value)
    assert np.isinf(np.array(nan & ~((1 << info.nmant) - 1), width).view(ML_NAMES[fmt]))
    assert nan + 1 == 1 << (info.bits - 1)  # every bit below the sign is set


# ---- no second home ---------------------------------------------------------------------
FAMILY = set(bits.F8F6F4)
#: files that may write the names of the fp8/6/4 formats as a tuple, and why
FAMILY_HOMES = {
    "spec/_spec.py": "the spec's type lists: the one home, which bits re-exports",
    "conformance/_wgmma_capture.py": "a script run alone on the GPU machine",
    "conformance/_xla_capture.py": "a script run alone on the GPU machine (NumPy and JAX)",
    "training/_recipes.py": "the public typing Literal of the fp8 recipe formats",
}
#: files that still write them (to move to the registry)
FAMILY_PENDING = {"xla_gpu/_hlo.py"}
#: files that still map dtypes to format names by hand (to move to the registry; the
#: capture script runs alone on the GPU machine, the library harness maps torch dtypes)
DTYPE_MAP_PENDING = {
    "xla_gpu/_hlo.py",
    "xla_gpu/_hlo_text.py",
    "xla_gpu/_replay.py",
    "gemm/_scaled_dot.py",
    "conformance/_library.py",
    "conformance/_xla_capture.py",
}
#: ml_dtypes' names of the formats, as the package might spell them
DTYPE_NAMES = set(ML_NAMES.values())


def _rel(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _strings(node) -> set[str]:
    return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _family_copies(source: str) -> list[int]:
    """Lines of tuple / list / set displays that name at least two fp8/6/4 formats."""
    tree = ast.parse(source)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(_strings(node) & FAMILY) >= 2
    )


def _dtype_maps(source: str) -> list[int]:
    """Lines of dict displays that pair format names with ml_dtypes names (as strings or
    as ``jnp.<name>`` attributes)."""

    def names(nodes) -> set[str]:
        out = set()
        for n in nodes:
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.add(n.value)
            elif isinstance(n, ast.Attribute):
                out.add(n.attr)
        return out

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys, values = names(node.keys), names(node.values)
            pairs = (keys & set(bits.FORMATS), values & DTYPE_NAMES)
            back = (values & set(bits.FORMATS), keys & DTYPE_NAMES)
            if all(pairs) or all(back):
                lines.append(node.lineno)
    return lines


def test_the_checkers_see_a_copy():
    assert _family_copies('x = 1\nFP8 = ("e4m3", "e5m2")\n') == [2]
    assert _family_copies('ok = fmt in ("e2m1",)\nSAT = ["e3m2", "e2m3", "s8"]\n') == [2]
    assert _dtype_maps('D = {"e4m3": jnp.float8_e4m3fn}\n') == [1]
    assert _dtype_maps('D = {"float4_e2m1fn": "e2m1"}\n') == [1]
    assert _dtype_maps('D = {"f32": 1, "e4m3": 7}\n') == []


def test_no_second_copy_of_the_family_tuple():
    found = {_rel(p): _family_copies(p.read_text()) for p in FILES}
    found = {f: lines for f, lines in found.items() if lines}
    extra = sorted(f"{f} lines {lines}" for f, lines in found.items() if f not in FAMILY_HOMES)
    extra = [e for e in extra if e.split(" ")[0] not in FAMILY_PENDING]
    assert not extra, "fp8/6/4 names written again; read bits.FP8 / bits.F8F6F4:\n" + "\n".join(
        extra
    )
    stale = (set(FAMILY_HOMES) | FAMILY_PENDING) - set(found)
    assert not stale, f"no copy left in {sorted(stale)}: remove them from this test"


def test_no_second_map_of_dtypes_and_names():
    found = {_rel(p): _dtype_maps(p.read_text()) for p in FILES if not _rel(p).startswith("bits/")}
    found = {f: lines for f, lines in found.items() if lines}
    extra = sorted(f"{f} lines {lines}" for f, lines in found.items() if f not in DTYPE_MAP_PENDING)
    assert not extra, "dtypes mapped to formats by hand; read bits.DTYPES:\n" + "\n".join(extra)
    stale = DTYPE_MAP_PENDING - set(found)
    assert not stale, f"DTYPE_MAP_PENDING: no map left in {sorted(stale)}"


#: the registry's names in bits' interface (the interface offers more: codecs, packing)
REGISTRY = {
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
}


def test_the_registry_is_in_the_interface():
    assert REGISTRY <= set(bits.__all__), sorted(REGISTRY - set(bits.__all__))


def test_other_floors_read_the_registry_from_the_package():
    """``from ..bits import FP8``, never ``_formats.FP8`` or ``from ..bits._wide import
    CANONICAL_NAN``: the interface says what the registry is."""
    found = []
    for path in FILES:
        if _rel(path).startswith("bits/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("bits.", "jaxmma.bits.")
            ):
                found += [f"{_rel(path)}:{node.lineno}" for a in node.names if a.name in REGISTRY]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("_formats", "_wide")
                and node.attr in REGISTRY - {"FORMATS", "get_format", "Format", "FloatFormat"}
            ):
                found.append(f"{_rel(path)}:{node.lineno}")
    assert not found, "registry names taken from bits' modules:\n" + "\n".join(found)
