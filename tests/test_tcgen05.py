"""``tcgen05.mma`` (PTX ISA 9.7.16.10): the forms, the errors, and the numerics.

The numerics are checked bit for bit against golden files of MMA-Sim's Blackwell models
(``TCGen05MMA``, ``TCGen05MMABlockScale``; its authors validated them on a B200), made by
``benchmarks/tcgen05_mmasim.py`` from random raw bits; no torch is needed here. The live
comparison with MMA-Sim runs where ``mmasim`` is installed.
"""

import doctest
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma.instructions import _instruction, _tcgen05
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
            if key.endswith(":D") and not key.startswith("gemm:"):
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
    forms = [f for f in _spec.forms("tcgen05.mma") if not f.sparse]
    per = {}
    for f in forms:
        per.setdefault((f.kind, f.cta_group), set()).add((f.m, f.n))
    assert len(per[("f16", 1)]) == 64 and len(per[("f16", 2)]) == 32
    assert len(per[("i8", 1)]) == 36 and len(per[("i8", 2)]) == 16
    assert len(per[("mxf4", 1)]) == 32 and len(per[("mxf4", 2)]) == 32
    # 3 f16 + 1 tf32 + 50 f8f6f4 + 4 i8 + 25 mxf8f6f4 + 1 mxf4 + 3 mxf4nvf4, per shape
    count = (3 + 1 + 50) * (64 + 32) + 4 * (36 + 16) + (25 + 1 + 3) * (32 + 32)
    assert len(forms) == count == 7248


def test_all_instructions_round_trip():
    every = jaxmma.all_instructions("tcgen05.mma")
    assert len(every) == len({i.text for i in every}) == 14448  # dense 7,456, sparse 6,992
    for ins in every[::37]:  # a spread sample: parsing all takes a while
        assert jaxmma.instruction(ins.text) == ins
        assert (
            jaxmma.tcgen05_instruction(
                ins.idesc,
                kind=ins.kind,
                cta_group=ins.cta_group,
                scale_vec=f"scale_vec::{ins.scale_vec}" if ins.scale_vec else None,
            )
            == ins
        )


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
        ("tcgen05.mma.ws.cta_group::1.kind::f16.m64n64k16.f32.f16.f16", "not emulated"),
        ("tcgen05.mma.cta_group::2.kind::mxf4.block_scale.m64n16k64.f32.e2m1.e2m1.ue8m0", "m64"),
        # a qualifier given twice is refused, never the last one kept
        (f"{HEAD}.kind::f16.kind::tf32.m128n8k8.f32.tf32.tf32", "kind given twice"),
        (f"{HEAD}.cta_group::2.kind::f16.m128n8k16.f32.f16.f16", "cta_group given twice"),
        (f"{HEAD}.kind::f16.m128n8k16.m128n16k16.f32.f16.f16", "shape given twice"),
        (f"{HEAD}.kind::f16.m128n8k16.f32.f16.f16.negate_a.negate_a", ".negate_a given twice"),
        (
            f"{HEAD}.kind::mxf4nvf4.block_scale.scale_vec::4X.m128n8k64.f32.e2m1.e2m1.ue4m3"
            ".block16",
            "scale vector size given twice",
        ),
        (
            f"{HEAD}.kind::mxf4.block_scale.scale_vec::2X.m128n8k64.f32.e2m1.e2m1.ue8m0.ue8m0",
            "scale type given twice",
        ),
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


# ---- the GEMM layer ---------------------------------------------------------------------
def _gemm_cases():
    path = GOLDEN / "tcgen05-gemm.npz"
    if not path.exists():
        return []
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    names = sorted({k[len("gemm:") :].rsplit(":", 1)[0] for k in data if k.startswith("gemm:")})
    return [pytest.param(n, data, id=n) for n in names]


GEMM_CASES = _gemm_cases()


def test_gemm_golden_file_is_there():
    assert len(GEMM_CASES) == 7


@pytest.mark.parametrize("name,data", GEMM_CASES)
def test_matmul_chains_like_mmasim(name, data):
    """``jaxmma.matmul`` along K = 4-8 instructions equals MMA-Sim's instruction chained
    with D as the next C (``benchmarks/tcgen05_mmasim.py``), bit for bit."""
    text = _text(name)
    ins = jaxmma.instruction(text)
    kind = name.split(".")[1]
    A = data[f"gemm:{name}:A"].astype(np.uint32)
    B = data[f"gemm:{name}:B"].astype(np.uint32)
    C = data[f"C_{ins.dtype}"].astype(np.uint32)
    want = data[f"gemm:{name}:D"].astype(np.uint32)
    assert A.shape[1] in (4 * ins.k, 8 * ins.k)
    if ins.stype:
        block = ins.k // {"1X": 1, "2X": 2, "4X": 4}[ins.scale_vec]
        Q = jaxmma.quant.Quantized
        A = Q(
            jnp.asarray(A, jnp.uint8),
            jnp.asarray(data[f"gemm:{name}:SA"]),
            None,
            ins.atype,
            ins.stype,
            block,
            -1,
        )
        B = Q(
            jnp.asarray(B, jnp.uint8),
            jnp.asarray(data[f"gemm:{name}:SB"]),
            None,
            ins.btype,
            ins.stype,
            block,
            -2,
        )
    else:
        A = jnp.asarray(_container(A, ins.atype, kind))
        B = jnp.asarray(_container(B, ins.btype, kind))
    D = jaxmma.matmul(A, B, jnp.asarray(C), instruction=text)
    width = jnp.uint16 if ins.dtype == "f16" else jnp.uint32
    got = np.asarray(jax.lax.bitcast_convert_type(D, width)).astype(np.uint32)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} of {want.size} differ, first at {bad[0].tolist()}"


def test_matmul_float_inputs_and_errors():
    text = f"{HEAD}.kind::mxf4nvf4.block_scale.block16.m128n8k64.f32.e2m1.e2m1.ue4m3"
    x = jax.random.normal(jax.random.key(1), (40, 200))
    w = jax.random.normal(jax.random.key(2), (200, 24))
    y = jaxmma.matmul(x, w, instruction=text)  # NVFP4-quantized along K, ragged K
    assert y.shape == (40, 24) and y.dtype == jnp.float32
    rel = jnp.linalg.norm(y - x @ w) / jnp.linalg.norm(x @ w)
    assert 0.01 < float(rel) < 0.3  # fp4 error, not garbage
    neg = jaxmma.instruction(f"{HEAD}.kind::f16.m128n8k16.f32.bf16.bf16.negate_a")
    with pytest.raises(ValueError, match="negate_a=False"):
        jaxmma.matmul(x, w, instruction=neg)


# ---- options, integers, transformations -------------------------------------------------
def test_negating_both_operands_keeps_the_golden_bits():
    """Negate A and B (idesc bits 13, 14): every product keeps its sign, so D equals
    MMA-Sim's D for the unnegated inputs; negating one operand changes it."""
    with np.load(GOLDEN / "tcgen05-f8f6f4-f32.npz") as z:
        name = "m128n80k32.kind::f8f6f4.f32.e3m2.e2m1"
        A = _container(z[f"{name}:A"].astype(np.uint32), "e3m2", "kind::f8f6f4")
        B = _container(z[f"{name}:B"].astype(np.uint32), "e2m1", "kind::f8f6f4")
        C, want = z["C_f32"].astype(np.uint32), z[f"{name}:D"].astype(np.uint32)
    both = jaxmma.instruction(_text(name) + ".negate_a.negate_b")
    one = jaxmma.instruction(_text(name) + ".negate_a")
    bits = lambda D: np.asarray(jax.lax.bitcast_convert_type(D, jnp.uint32))  # noqa: E731
    assert np.array_equal(bits(both.mma(A, B, C)), want)
    assert np.mean(bits(one.mma(A, B, C)) != want) > 0.3


def test_enable_input_d_and_scale_input_d():
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m64n8k16.f32.f16.f16")
    A = jnp.full((64, 16), 0.5, jnp.float16)
    B = jnp.full((16, 8), 2.0, jnp.float16)
    C = jnp.full((64, 8), 1000.0, jnp.float32)
    assert float(ins.mma(A, B, C)[0, 0]) == 1016.0
    assert float(ins.mma(A, B, C, enable_input_d=False)[0, 0]) == 16.0
    assert float(ins.mma(A, B, C, scale_input_d=3)[0, 0]) == 16.0 + 1000.0 / 8
    with pytest.raises(ValueError, match="scale_input_d"):
        ins.mma(A, B, C, scale_input_d=16)
    with pytest.raises(ValueError, match="enable_input_d"):
        ins.mma(A, B, C, enable_input_d=2)
    with pytest.raises(ValueError, match=r"A \[\.\.\., M, 16\]"):
        ins.mma(A[:, :8], B[:8], C)


@pytest.mark.parametrize("sat", [False, True])
def test_i8_is_the_exact_sum_wrapped_or_clamped(sat):
    rng = np.random.default_rng(7)
    text = f"{HEAD}.kind::i8.m64n16k32.s32.s8.u8" + (".satfinite" if sat else "")
    ins = jaxmma.instruction(text)
    A = rng.integers(-128, 128, (64, 32))
    B = rng.integers(0, 256, (32, 16))
    A[0], B[:, 0] = -128, 255
    C = rng.integers(-(2**31), 2**31, (64, 16))
    C[:8] = 2**31 - 1
    C[8:16] = -(2**31)
    exact = A @ B + C  # int64
    want = np.clip(exact, -(2**31), 2**31 - 1) if sat else (exact + 2**31) % 2**32 - 2**31
    D = ins.mma(jnp.asarray(A, jnp.int8), jnp.asarray(B, jnp.uint8), jnp.asarray(C, jnp.int32))
    assert D.dtype == jnp.int32 and np.array_equal(np.asarray(D), want)
    assert np.any(exact > 2**31 - 1) and np.any(exact < -(2**31))  # both limits reached


def test_jit_vmap_grad():
    ins = jaxmma.instruction(f"{HEAD}.kind::f16.m64n8k16.f32.bf16.bf16")
    keys = jax.random.split(jax.random.key(0), 3)
    A = jax.random.normal(keys[0], (3, 64, 16)).astype(jnp.bfloat16)
    B = jax.random.normal(keys[1], (16, 8)).astype(jnp.bfloat16)
    C = jax.random.normal(keys[2], (64, 8))
    eager = jnp.stack([ins.mma(A[i], B, C) for i in range(3)])
    assert np.array_equal(np.asarray(jax.jit(ins.mma)(A, B, C)), np.asarray(eager))
    mapped = jax.vmap(ins.mma, in_axes=(0, None, None))(A, B, C)
    assert np.array_equal(np.asarray(mapped), np.asarray(eager))
    gA, gC = jax.grad(lambda a, c: jnp.sum(ins.mma(a, B, c)), argnums=(0, 1))(A[0], C)
    want = np.ones((64, 8), np.float32) @ np.asarray(B, np.float32).T  # straight-through
    assert np.array_equal(np.asarray(gA, np.float32), want.astype(jnp.bfloat16).astype(np.float32))
    assert np.array_equal(np.asarray(gC), np.ones((64, 8), np.float32))
    neg = jaxmma.instruction(ins.text + ".negate_b")
    gB = jax.grad(lambda b: jnp.sum(neg.mma(A[0], b, C)))(B)
    want_b = -(np.asarray(A[0], np.float32).T @ np.ones((64, 8), np.float32))
    assert np.allclose(np.asarray(gB, np.float32), want_b, rtol=1e-2)


# ---- MMA-Sim itself, where it is installed ----------------------------------------------
@pytest.mark.full  # the live MMA-Sim comparison; the golden files are checked in the quick run
def test_live_mmasim_comparison():
    """Fresh random bits through MMA-Sim and jaxmma (skipped without mmasim/torch)."""
    torch = pytest.importorskip("torch")
    sim = pytest.importorskip("mmasim.nv_ptx.sim")
    rng = np.random.default_rng()
    for name, view in (
        ("m128n64k16.kind::f16.f32.bf16.bf16", (torch.int16, torch.bfloat16)),
        ("m64n64k32.kind::f8f6f4.f16.e5m2.e4m3", None),
    ):
        ins = jaxmma.instruction(_text(name))
        k = ins.k
        nb = 16 if ins.atype == "bf16" else 8
        A = rng.integers(0, 1 << nb, (ins.m, k)).astype(np.uint32)
        B = rng.integers(0, 1 << nb, (k, ins.n)).astype(np.uint32)
        cw = 32 if ins.dtype == "f32" else 16
        C = rng.integers(0, 1 << cw, (ins.m, ins.n)).astype(np.uint32)
        if view is not None:
            ta = torch.from_numpy(A.astype(np.uint16).view(np.int16)).view(view[1])
            tb = torch.from_numpy(B.astype(np.uint16).view(np.int16)).view(view[1])
        else:
            ta = torch.from_numpy(A.astype(np.uint8)).view(torch.float8_e5m2)
            tb = torch.from_numpy(B.astype(np.uint8)).view(torch.float8_e4m3fn)
        tc_np = (
            C.astype(np.uint32).view(np.int32) if cw == 32 else C.astype(np.uint16).view(np.int16)
        )
        tc = torch.from_numpy(tc_np).view(torch.float32 if cw == 32 else torch.float16)
        want = sim.TCGen05MMA("Blackwell", name)(ta, tb, tc)
        want = want.view(torch.int32 if cw == 32 else torch.int16).numpy()
        want = want.view(np.uint32 if cw == 32 else np.uint16).astype(np.uint32)
        D = ins.mma(jnp.asarray(A), jnp.asarray(B), jnp.asarray(C))
        got = np.asarray(jax.lax.bitcast_convert_type(D, jnp.uint32 if cw == 32 else jnp.uint16))
        assert np.array_equal(got.astype(np.uint32), want), name


# ---- the instruction descriptor ---------------------------------------------------------
@pytest.mark.parametrize(
    "idesc,kw,text",
    [  # idesc values composed by hand from the spec's bit tables
        (0x08400490, {"kind": "f16"}, f"{HEAD}.kind::f16.m128n256k16.f32.bf16.bf16"),
        (
            0x08400480,
            {"kind": "mxf4nvf4", "scale_vec": "block16"},
            f"{HEAD}.kind::mxf4nvf4.block_scale.scale_vec::4X.m128n256k64.f32.e2m1.e2m1.ue4m3",
        ),
        (
            0x08901400,
            {"kind": "mxf8f6f4"},
            f"{HEAD}.kind::mxf8f6f4.block_scale.scale_vec::1X.m128n64k32.f32.e4m3.e2m1.ue8m0",
        ),
        (0x040C00A8, {"kind": "i8"}, f"{HEAD}.kind::i8.m64n48k32.s32.s8.u8.satfinite"),
        (
            0x10040910,
            {"kind": "tf32", "cta_group": 2},
            "tcgen05.mma.cta_group::2.kind::tf32.m256n16k8.f32.tf32.tf32",
        ),
        (
            0x08106000 | (1 << 4),
            {"kind": "f16"},
            f"{HEAD}.kind::f16.m128n64k16.f32.f16.f16.negate_a.negate_b",
        ),
    ],
)
def test_idesc_round_trips(idesc, kw, text):
    ins = jaxmma.tcgen05_instruction(idesc, **kw)
    assert ins.text == text
    assert ins.idesc == idesc
    assert jaxmma.instruction(text).idesc == idesc
    # transposes (bits 15, 16) name how memory is read: the same form
    if kw["kind"] not in ("mxf4", "mxf4nvf4"):
        assert jaxmma.tcgen05_instruction(idesc | (3 << 15), **kw) == ins


@pytest.mark.parametrize(
    "idesc,kw,needle",
    [
        (0x08400490 | (1 << 6), {"kind": "f16"}, "reserved bit 6"),
        (0x08400490 | 1, {"kind": "f16"}, "sparsity selector (bits 0-1) of a dense MMA"),
        (0x08400010 | (2 << 7) | (2 << 10), {"kind": "f8f6f4"}, "atype (bits 7-9) 2"),
        (0x08400490 | (1 << 31), {"kind": "f16"}, "maximum shift"),
        (0x08400480 | (1 << 31), {"kind": "mxf4nvf4", "scale_vec": "block16"}, "K = 96"),
        (0x08400480, {"kind": "mxf4"}, "scale type (bit 23) 0"),
        (0x08400490 | (1 << 3), {"kind": "f16"}, "saturate"),
        (0x08400400 | 0x90 | (1 << 24), {"kind": "f16"}, "shape"),
    ],
)
def test_idesc_errors(idesc, kw, needle):
    with pytest.raises(ValueError) as e:
        jaxmma.tcgen05_instruction(idesc, **kw)
    assert needle in str(e.value)
    with pytest.raises(TypeError, match="idesc"):
        jaxmma.tcgen05_instruction(1.5, kind="f16")


@pytest.mark.parametrize(
    "kw,exc,match",
    [
        (
            dict(kind="kind::f16"),
            ValueError,
            r"kind: expected one of \['f16', 'tf32', .*'mxf4nvf4'\] \(without the 'kind::' "
            r"prefix: 'f16'\), got 'kind::f16'",
        ),
        (dict(kind="f32"), ValueError, r"kind: expected one of \['f16'.*got 'f32'"),
        (dict(kind=16), TypeError, r"kind: expected a str"),
        (dict(kind="f16", cta_group=3), ValueError, r"cta_group: expected 1 or 2, got 3"),
        (dict(kind="f16", cta_group="1"), TypeError, r"cta_group: expected the int 1 or 2"),
        (dict(kind="f16", scale_vec=16), TypeError, r"scale_vec: expected None or a str"),
    ],
)
def test_descriptor_arguments_are_named(kw, exc, match):
    """Each keyword of tcgen05_instruction is checked and named, with its allowed values
    (``kind="kind::f16"`` was reported as an idesc error listing 'kind::f16' as allowed)."""
    with pytest.raises(exc, match=match):
        jaxmma.tcgen05_instruction(0x08400490, **kw)


def test_descriptor_takes_numpy_ints():
    want = jaxmma.tcgen05_instruction(0x08400490, kind="f16")
    assert (
        jaxmma.tcgen05_instruction(np.uint32(0x08400490), kind="f16", cta_group=np.int64(1)) == want
    )


def test_doctests():
    assert doctest.testmod(_tcgen05).failed == 0
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(_instruction.tcgen05_instruction, globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 3


def test_block_scaled_jit_vmap_grad():
    text = f"{HEAD}.kind::mxf8f6f4.block_scale.m128n16k32.f32.e4m3.e4m3.ue8m0"
    ins = jaxmma.instruction(text)
    keys = jax.random.split(jax.random.key(3), 2)
    A = jax.random.normal(keys[0], (2, 128, 32)).astype(jnp.float8_e4m3fn)
    B = jax.random.normal(keys[1], (32, 16)).astype(jnp.float8_e4m3fn)
    C = jnp.zeros((128, 16), jnp.float32)
    SA = np.full((128, 1), 0x80, np.uint8)  # 2.0
    SB = np.full((1, 16), 0x7E, np.uint8)  # 0.5
    SA[:64] = 0x81  # 4.0
    one = ins.mma(A[0], B, C, scale_a=SA, scale_b=SB)
    assert np.array_equal(
        np.asarray(jax.jit(ins.mma)(A[0], B, C, scale_a=SA, scale_b=SB)), np.asarray(one)
    )
    mapped = jax.vmap(lambda a: ins.mma(a, B, C, scale_a=SA, scale_b=SB))(A)
    assert np.array_equal(np.asarray(mapped[0]), np.asarray(one))
    gA = jax.grad(lambda a: jnp.sum(ins.mma(a, B, C, scale_a=SA, scale_b=SB)))(
        A[0].astype(jnp.float32).astype(jnp.float8_e4m3fn)
    )
    sa = np.where(np.arange(128) < 64, 4.0, 2.0)[:, None]
    want = sa * (np.ones((128, 16)) @ (0.5 * np.asarray(B, np.float64)).T)
    assert np.allclose(np.asarray(gA, np.float64), want.astype(jnp.float8_e4m3fn), rtol=0.07)


@pytest.mark.full  # about 12 s of compiles; each form has its own checks in the quick run
def test_nvfp4_gemm_same_bits_as_sm120_mma():
    """In MMA-Sim's models a B200 ``tcgen05.mma`` NVFP4 instruction and an RTX 50
    (``sm_120a``) ``mma.sync`` one compute alike (groups of 16, F = 35; both K = 64): an
    NVFP4 GEMM gives the same bits on either (docs/tcgen05.md)."""
    x = jax.random.normal(jax.random.key(5), (48, 320))
    w = jax.random.normal(jax.random.key(6), (320, 40))
    tc = f"{HEAD}.kind::mxf4nvf4.block_scale.block16.m128n8k64.f32.e2m1.e2m1.ue4m3"
    mma = (
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3"
    )
    a = jaxmma.matmul(x, w, instruction=tc)
    b = jaxmma.matmul(x, w, instruction=mma, arch="sm_120a")
    assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))
    fp8 = jaxmma.matmul(x, w, instruction=f"{HEAD}.kind::f8f6f4.m128n8k32.f32.e4m3.e4m3")
    hopper = jaxmma.matmul(x, w, instruction="wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3")
    assert not np.array_equal(np.asarray(fp8), np.asarray(hopper))  # Hopper keeps 13 bits


def test_descriptor_of_a_shape_the_table_lacks_names_idesc():
    with pytest.raises(ValueError, match=r"idesc: 0x00000000 decodes to .*m0n0k16.*invalid shape"):
        jaxmma.tcgen05_instruction(0, kind="f16")
