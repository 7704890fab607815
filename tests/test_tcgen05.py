"""``tcgen05.mma`` (PTX ISA 9.7.16.10): the forms, the errors, and the numerics.

The numerics are checked bit for bit against golden files of MMA-Sim's Blackwell models
(``TCGen05MMA``, ``TCGen05MMABlockScale``; its authors validated them on a B200), made by
``benchmarks/tcgen05_mmasim.py`` from random raw bits; no torch is needed here. The live
comparison with MMA-Sim runs where ``mmasim`` is installed.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.spec import _spec

GOLDEN = pathlib.Path(__file__).parent / "golden" / "sm_100"
FILES = sorted(GOLDEN.glob("tcgen05-*.npz"))
HEAD = "tcgen05.mma.cta_group::1"


def _text(name: str) -> str:
    """MMA-Sim's ``shape.kind::K{.blockN}.d.a.b{.s}`` -> jaxmma's text."""
    shape, kind, *rest = name.split(".")
    if rest[0].startswith("block"):
        return f"{HEAD}.{kind}.block_scale.{rest[0]}.{shape}." + ".".join(rest[1:])
    return f"{HEAD}.{kind}.{shape}." + ".".join(rest)


def _golden():
    for path in FILES:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
        for key in data:
            if key.endswith(":D"):
                name = key[:-2]
                yield pytest.param(path.name, name, data, id=name)


CASES = list(_golden())


def _container(bits, fmt, kind):
    """jaxmma's operand encoding of kind::f8f6f4/mxf8f6f4: fp4 in bits 5:2 of a byte."""
    return bits << 2 if (kind in ("kind::f8f6f4", "kind::mxf8f6f4") and fmt == "e2m1") else bits


def test_golden_files_cover_every_kind():
    names = [c.values[1] for c in CASES]
    kinds = {n.split(".")[1] for n in names}
    assert kinds == {f"kind::{k}" for k in ("tf32", "f16", "f8f6f4", "mxf8f6f4", "mxf4")} | {
        "kind::mxf4nvf4"
    }
    assert len(names) == 83  # 4 tf32/f16 + 50 f8f6f4 + 25 mxf8f6f4 + 4 mxf4*


@pytest.mark.parametrize("fname,name,data", CASES)
def test_matches_mmasim_golden(fname, name, data):
    ins = jaxmma.instruction(_text(name))
    assert ins.arch == "sm_100a"
    kind = name.split(".")[1]
    A = _container(data[f"{name}:A"].astype(np.uint32), ins.atype, kind)
    B = _container(data[f"{name}:B"].astype(np.uint32), ins.btype, kind)
    C = data[f"C_{ins.dtype}"].astype(np.uint32)
    want = data[f"{name}:D"].astype(np.uint32)
    kw = {}
    if ins.stype:
        kw = {"scale_a": data[f"{name}:SA"], "scale_b": data[f"{name}:SB"]}
    D = ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C), **kw)
    width = jnp.uint16 if ins.dtype == "f16" else jnp.uint32
    got = np.asarray(jax.lax.bitcast_convert_type(D, width)).astype(np.uint32)
    assert want.size >= 10_000
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{len(bad)} of {want.size} differ; first at {bad[0].tolist()}: "
        f"got {got[tuple(bad[0])]:#x}, MMA-Sim {want[tuple(bad[0])]:#x}"
    )


def test_golden_inputs_reach_the_corner_cases():
    """The vectors hold NaN/Inf results, zeros, subnormal results and NaN scales."""
    with np.load(GOLDEN / "tcgen05-f8f6f4-f32.npz") as z:
        d = np.concatenate([z[k].astype(np.uint32).ravel() for k in z.files if k.endswith(":D")])
    assert np.sum(d == 0x7FFFFFFF) > 100  # canonical NaN
    assert np.sum((d & 0x7FFFFFFF) == 0x7F800000) > 10  # +-Inf
    assert np.sum(d == 0) > 100  # +0
    with np.load(GOLDEN / "tcgen05-dense.npz") as z:
        d = z["m128n80k8.kind::tf32.f32.tf32.tf32:D"].astype(np.uint32)
    assert np.sum(((d >> 23) & 0xFF) == 0) > 50  # subnormal f32 results
    with np.load(GOLDEN / "tcgen05-mxf4.npz") as z:
        sa = z["m128n80k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3:SA"]
    assert np.any(sa == 0x7F) and np.any(sa == 0)  # NaN and zero ue4m3 scales


# ---- the forms --------------------------------------------------------------------------
def test_form_count_follows_the_shape_table():
    """Table 42 (dense, no .ws): cta_group::1 M = 64/128 (block-scaled: 128), N = 8..256 by
    8 (.kind::i8: 8, 16, 24, 32, 48, ..., 256); cta_group::2 M = 128/256, N = 16..256 by
    16 (.kind::i8: 32..256 by 32)."""
    forms = _spec.forms("tcgen05.mma")
    per = {}
    for f in forms:
        per.setdefault((f.kind, f.cta_group), set()).add((f.m, f.n))
    assert len(per[("f16", 1)]) == 64 and len(per[("f16", 2)]) == 32
    assert len(per[("i8", 1)]) == 36 and len(per[("i8", 2)]) == 16
    assert len(per[("mxf4", 1)]) == 32 and len(per[("mxf4", 2)]) == 32
    # 3 f16 + 1 tf32 + 50 f8f6f4 + 4 i8 + 25 mxf8f6f4 + 1 mxf4 + 3 mxf4nvf4, per shape
    count = (3 + 1 + 50) * (64 + 32) + 4 * (36 + 16) + (25 + 1 + 3) * (32 + 32)
    assert len(forms) == count == 7248


@pytest.mark.parametrize(
    "text,canonical",
    [
        (f"{HEAD}.kind::f16.m128n256k16.f32.bf16.bf16", None),
        ("tcgen05.mma.cta_group::2.kind::tf32.m256n16k8.f32.tf32.tf32", None),
        (
            f"{HEAD}.kind::mxf4nvf4.block_scale.block16.m128n8k64.f32.e2m1.e2m1.ue4m3",
            f"{HEAD}.kind::mxf4nvf4.block_scale.scale_vec::4X.m128n8k64.f32.e2m1.e2m1.ue4m3",
        ),
        (
            f"{HEAD}.kind::mxf8f6f4.block_scale.m128n8k32.f32.e3m2.e2m1.ue8m0",
            f"{HEAD}.kind::mxf8f6f4.block_scale.scale_vec::1X.m128n8k32.f32.e3m2.e2m1.ue8m0",
        ),
        (f"{HEAD}.kind::i8.m64n48k32.s32.s8.u8.satfinite", None),
    ],
)
def test_text_round_trips(text, canonical):
    ins = jaxmma.instruction(text)
    assert ins.text == (canonical or text)
    assert jaxmma.instruction(ins.text) == ins


@pytest.mark.parametrize(
    "text,needle",
    [
        (f"{HEAD}.kind::f16.m128n250k16.f32.bf16.bf16", "invalid shape 'm128n250k16'"),
        (f"{HEAD}.kind::f16.m128n256k16.f16.bf16.bf16", "invalid dtype 'f16'"),
        ("tcgen05.mma.cta_group::3.kind::f16.m128n8k16.f32.f16.f16", "cta_group::3"),
        (f"{HEAD}.kind::f9.m128n8k16.f32.f16.f16", "invalid .kind"),
        (f"{HEAD}.kind::mxf4nvf4.block_scale.m128n8k64.f32.e2m1.e2m1.ue4m3", "explicit"),
        (f"{HEAD}.kind::mxf4.block_scale.block16.m128n8k64.f32.e2m1.e2m1.ue8m0", "block16"),
        (f"{HEAD}.kind::mxf4nvf4.block_scale.block32.m128n8k64.f32.e2m1.e2m1.ue4m3", "ue4m3"),
        (f"{HEAD}.kind::f16.m64n8k16.f32.f16.f16.satfinite", "satfinite"),
        (f"{HEAD}.kind::mxf4.m128n8k64.f32.e2m1.e2m1.ue8m0", "block_scale"),
        (f"{HEAD}.kind::f16", "instruction descriptor"),
        ("tcgen05.mma.sp.cta_group::1.kind::f16.m64n8k32.f32.f16.f16", "not emulated"),
        ("tcgen05.mma.cta_group::2.kind::mxf4.block_scale.m64n16k64.f32.e2m1.e2m1.ue8m0", "m64"),
    ],
)
def test_errors_name_the_field(text, needle):
    with pytest.raises(ValueError, match=None) as e:
        jaxmma.instruction(text)
    assert needle in str(e.value)


def test_targets():
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m128n8k16.f32.f16.f16")
    assert ins.runs_on("sm_100a") and ins.runs_on("sm_103a") and ins.runs_on("sm_110a")
    assert not ins.runs_on("sm_100") and not ins.runs_on("sm_90a") and not ins.runs_on("sm_120a")
    i8 = jaxmma.instruction(f"{HEAD}.kind::i8.m128n16k32.s32.s8.s8")
    assert not i8.runs_on("sm_103a")
    with pytest.raises(ValueError, match="sm_120a"):
        jaxmma.instruction(ins.text, arch="sm_120a")
