"""The instruction table and the parser: every spec example, every rule, the form count."""

import dataclasses

import jax
import pytest

import jaxmma
from jaxmma.spec import _ptx, _spec

EXAMPLES = "tests/data/spec_examples.txt"

# Examples printed in the spec that ptxas (CUDA 13.0, PTX ISA 9.0) refuses: the parser
# refuses them too, for the reason given (see _spec.SPEC_ERRATA).
REFUSED_EXAMPLES = {
    "stmatrix.sync.aligned.m16n8.x4.b8": ".trans is mandatory",
    "wmma.mma.sync.m16n16k16.row.col.f32.f32": "mandatory qualifier",
    "wmma.store.d.sync.m16n16k16.row.f32": "mandatory qualifier",
}


def _examples():
    with open(EXAMPLES) as f:
        return [line.strip() for line in f if line.strip()]


@pytest.mark.parametrize("text", _examples())
def test_every_spec_example_parses_or_is_a_documented_erratum(text):
    if text in REFUSED_EXAMPLES:
        with pytest.raises(ValueError, match=REFUSED_EXAMPLES[text]):
            jaxmma.instruction(text)
        return
    ins = jaxmma.instruction(text + " {d0}, {a0}, {b0}, {c0};")
    # the canonical text parses back to the same instruction
    assert jaxmma.instruction(ins.text, arch=ins.arch) == ins


def test_variant_count_is_the_spec_count():
    """1156 instruction texts (state spaces not counted), derived by hand from the spec:

    dense mma 184 = f16 16 (m8n8k4: 3 dtype/ctype pairs x 4 layouts; m16n8k8: 2;
    m16n8k16: 2) + bf16 2 + tf32 2 + fp8 16 (2 shapes x 4 type pairs x 2 accumulators)
    + kind::f8f6f4 50 (25 type pairs x 2) + block scale 28 (mxf8f6f4 25, mxf4 1,
    mxf4nvf4 2) + f64 16 (4 shapes x 4 roundings) + s8/u8 24 (3 shapes x 4 mixes x
    .satfinite or not) + s4/u4 24 + b1 6 (3 shapes x and/xor);
    sparse mma 166 = 2 variants x 44 (f16 4, bf16 2, tf32 2, s8/u8 16, s4/u4 16, fp8 4)
    + ordered_metadata only: f8f6f4 50, mxf8f6f4 25, mxf4 1, mxf4nvf4 2;
    wmma.load 88 (a/b: 62; c: 13 shape/type pairs x 2 layouts); wmma.store 26;
    wmma.mma 134 (f16 48, bf16 12, tf32 4, s8/u8 48, s4/u4 4, b1 2, f64 16);
    ldmatrix 18, stmatrix 9, movmatrix 1;
    wgmma.mma_async 530 (tests/test_wgmma.py counts them). The tcgen05.mma rows (9.7.16)
    are kept apart from the total: 14,448 texts, dense and sparse (tests/test_tcgen05.py
    counts them).
    """
    assert _spec.count_variants() == 1156
    by_op = {op: _spec.count_variants(op) for op in _spec.OPCODES}
    assert by_op == {
        "mma": 350,
        "wmma.load": 88,
        "wmma.store": 26,
        "wmma.mma": 134,
        "ldmatrix": 18,
        "stmatrix": 9,
        "movmatrix": 1,
        "wgmma.mma_async": 530,
        "tcgen05.mma": 14448,
    }
    assert len(jaxmma.all_instructions()) == 1156
    texts = {i.text for i in jaxmma.all_instructions()}
    assert len(texts) == 1156  # every variant has its own text


@pytest.mark.parametrize("ins", jaxmma.all_instructions(), ids=lambda i: i.text)
def test_every_form_round_trips_through_its_text(ins):
    again = jaxmma.instruction(ins.text, arch=ins.arch)
    assert again.form == ins.form
    assert again.text == ins.text


FORBIDDEN = [
    # (text, arch, words the message must contain)
    ("mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f32", None, [".dtype", "f32"]),
    ("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f32", None, [".dtype", "f32"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f16", None, [".dtype", "f16"]),
    ("mma.sync.aligned.m16n8k8.row.col.f32.bf16.tf32.f32", None, [".btype", "bf16"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.satfinite", None, ["satfinite"]),
    ("mma.sync.aligned.m16n8k16.col.col.f32.f16.f16.f32", None, ["layout", "row.col"]),
    ("mma.sync.aligned.m16n8k9.row.col.f32.f16.f16.f32", None, ["shape", "m16n8k16"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f16", None, [".dtype"]),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e3m2.e2m1.f32", None, ["missing .kind", "f8f6f4"]),
    (
        "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32",
        "sm_90",
        ["sm_90", "sm_120a"],
    ),
    ("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32", "sm_120", ["sm_120a"]),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "sm_80", ["sm_89"]),
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64", "sm_80", ["sm_90"]),
    ("mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.and.popc", "sm_75", ["sm_80"]),
    ("mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.or.popc", None, ["unknown", ".or"]),
    ("mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor", None, ["popc"]),
    (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.f32.e2m1.e2m1.f32.ue8m0",
        None,
        ["scale_vec_size", "scale_vec::2X", "scale_vec::4X"],
    ),
    (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue8m0",
        None,
        [".stype", "ue4m3"],
    ),
    (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::2X"
        ".f32.e2m1.e2m1.f32.ue4m3",
        None,
        [".stype", "ue8m0"],
    ),
    (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue8m0",
        None,
        ["scale_vec_size", "2X"],
    ),
    ("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.f32.e4m3.e4m3.f32", None, ["block_scale"]),
    ("mma.sync.aligned.m16n8k32.row.col.f64.f64.f64.f64", None, [".atype 'f64'", "m16n8k32"]),
    ("mma.sync.aligned.m16n8k16.row.col.rz.f32.f16.f16.f32", None, ["rounding", "f64"]),
    ("mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f16", None, [".dtype"]),
    ("mma.sp.sync.aligned.m16n8k64.row.col.f16.e4m3.e4m3.f16", None, [".ctype"]),
    (
        "mma.sp.sync.aligned.m16n8k64.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32",
        None,
        ["only as mma.sp::ordered_metadata"],
    ),
    ("mma.sp.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", None, [".atype", "tf32"]),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_60", ["arch", "sm_70"]),
    ("mma.sync.m16n8k16.row.col.f32.f16.f16.f32", None, ["aligned"]),
    ("mma.aligned.m16n8k16.row.col.f32.f16.f16.f32", None, ["sync"]),
    ("mma.sync.aligned.m16n8k16.m16n8k16.row.col.f32.f16.f16.f32", None, ["twice"]),
    ("mma.sync.aligned.row.col.f32.f16.f16.f32", None, ["shape"]),
    ("mmx.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", None, ["opcode"]),
    ("wmma.load.d.sync.aligned.row.m16n16k16.f32", None, ["matrix qualifier", "a, b, c"]),
    ("wmma.load.a.sync.aligned.col.m8n8k32.s4", None, ["layout", "row"]),
    ("wmma.load.a.sync.aligned.row.m16n16k16.f32", None, [".atype", "f16"]),
    ("wmma.mma.sync.aligned.row.col.m16n16k16.s32.s8.u8.s32", None, [".btype", "s8"]),
    ("wmma.mma.sync.aligned.row.row.m8n8k32.s32.s4.s4.s32", None, ["layout", "row.col"]),
    ("ldmatrix.sync.aligned.m16n16.x4.trans.shared.b8", None, [".num", "x1", "x2"]),
    ("ldmatrix.sync.aligned.m16n16.x2.shared.b8", None, [".trans is mandatory"]),
    ("ldmatrix.sync.aligned.m8n8.x2.b8", None, [".type", "b16"]),
    ("ldmatrix.sync.aligned.m8n8.x2.global.b16", None, ["state space", "shared"]),
    ("ldmatrix.sync.aligned.m16n16.x2.trans.b8", "sm_90", ["sm_100a"]),
    ("stmatrix.sync.aligned.m8n8.x4.b16", "sm_80", ["sm_90"]),
    ("stmatrix.sync.aligned.m16n8.x4.b16", None, [".type", "b8"]),
    ("movmatrix.sync.aligned.m8n8.b16", None, [".trans is mandatory"]),
    ("movmatrix.sync.aligned.m16n16.trans.b16", None, ["shape", "m8n8"]),
    ("", None, ["empty"]),
]


@pytest.mark.parametrize("text,arch,words", FORBIDDEN)
def test_forbidden_combinations_are_refused_with_a_clear_message(text, arch, words):
    with pytest.raises(ValueError) as err:
        jaxmma.instruction(text, arch=arch)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_type_errors():
    with pytest.raises(TypeError, match="text"):
        jaxmma.instruction(42)
    with pytest.raises(TypeError, match="arch"):
        jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16", arch=90)


def test_defaults_and_properties():
    ins = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c;")
    assert ins.arch == "sm_120"
    assert (ins.m, ins.n, ins.k) == (16, 8, 16)
    assert ins.nregs == {"d": 4, "a": 4, "b": 2, "c": 4}
    assert ins.targets == "sm_80 or newer" and ins.ptx_version == "7.0"
    f8 = jaxmma.instruction("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32")
    assert f8.arch == "sm_120a" and f8.nregs == {"d": 4, "a": 4, "b": 2, "c": 4}
    mx = jaxmma.instruction(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.f32.e2m1.e2m1.f32.ue8m0"
    )
    assert mx.scale_vec == "2X"  # the spec's default for mxf4
    assert mx.nregs == {"d": 4, "a": 4, "b": 2, "c": 4, "scale_a": 1, "scale_b": 1}
    sp = jaxmma.instruction(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32", arch="sm_90a"
    )
    assert sp.nregs == {"d": 4, "a": 4, "b": 4, "c": 4, "e": 1}
    f64 = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.rm.f64.f64.f64.f64")
    assert f64.rounding == "rm" and f64.nregs == {"d": 2, "a": 1, "b": 1, "c": 2}
    assert {o.reg_bits for o in f64.operands} == {64}
    h = jaxmma.instruction("mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f32")
    assert (h.alayout, h.blayout) == ("col", "row") and h.nregs["d"] == 8
    w = jaxmma.instruction("wmma.load.c.sync.aligned.row.m8n8k4.f64")
    assert w.nregs == {"d": 2}  # the spec's table says one register; ptxas needs two
    assert jaxmma.instruction("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f16").nregs == {
        "d": 8,
        "a": 8,
        "b": 8,
        "c": 4,
    }
    ld = jaxmma.instruction("ldmatrix.sync.aligned.m16n16.x2.trans.shared::cta.b8")
    assert ld.nregs == {"r": 4} and ld.arch == "sm_120a"


def test_instruction_is_hashable_and_a_valid_static_argument():
    a = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16", arch="sm_90")
    b = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16;", arch="sm_90")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.arch = "sm_80"
    f = jax.jit(lambda x, ins: x + ins.m, static_argnums=1)
    assert int(f(1, a)) == 9


def test_arch_parsing():
    assert _ptx.parse_arch("sm_90a") == _ptx.Arch(90, "a")
    assert _ptx.parse_arch("120f") == _ptx.Arch(120, "f")
    with pytest.raises(ValueError, match="sm_70"):
        _ptx.parse_arch("sm_95")


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
