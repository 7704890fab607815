"""Property-based checks of the public entry points (hypothesis).

Random valid and invalid arguments of ``formats.encode``, the matrix level of an
instruction (``ins.mma``, and the register level through fragments), ``matmul`` with
kernel options, the quantizers, ``scaled_dot_general`` and the ``tcgen05`` text and
descriptor parsers. Each valid result is compared, bit for bit, with an oracle written
here (exact rationals, NumPy integer and float64 products, ml_dtypes decoding), never
with the code under test; each invalid call must raise ``ValueError`` or ``TypeError``
whose message names the argument. Eager calls and ``jax.jit`` give the same bits or the
same exception type (the arguments that JAX would convert at a jit boundary, host
doubles, are closed over).

The quick run draws a few examples per property (``JAXMMA_TEST_SEED`` seeds them); the
full sweep (``--full``) draws more.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _suite import full_sweep, seed
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import jaxmma
from jaxmma import formats, quant

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
F16 = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32"
S8 = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
DTYPES = {
    BF16: (jnp.bfloat16, jnp.bfloat16, jnp.float32),
    F16: (jnp.float16, jnp.float16, jnp.float16),
    E4M3: (jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float32),
    S8: (jnp.int8, jnp.int8, jnp.int32),
    TF32: (jnp.float32, jnp.float32, jnp.float32),
}
ARCH = "sm_90"


def examples(quick: int, full: int = 25):
    """hypothesis settings: ``quick`` examples in the quick run, ``full`` in the sweep,
    drawn from this run's seed (reproduced with ``JAXMMA_TEST_SEED``)."""

    def wrap(f):
        f = settings(
            max_examples=full if full_sweep() else quick,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(f)
        return hypothesis_seed(seed())(f)

    return wrap


def same_error(fn, names):
    """``fn()`` eagerly and under ``jax.jit`` raises ValueError or TypeError, the same
    type both ways, whose message names one of ``names``."""
    types = []
    for call in (fn, lambda: jax.jit(fn)()):
        with pytest.raises((ValueError, TypeError)) as e:
            call()
        assert any(n in str(e.value) for n in names), (names, str(e.value)[:300])
        types.append(type(e.value))
    assert types[0] is types[1], types


def eager_and_jit(fn, *args):
    """The bits of ``fn(*args)`` eagerly, checked equal to those under ``jax.jit`` (the
    arrays ``args`` as its arguments; what ``fn`` closes over as constants)."""
    a, b = np.asarray(fn(*args)), np.asarray(jax.jit(fn)(*args))
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))
    return a


# ---- formats.encode: host doubles, every deterministic mode, against exact rationals --
#: (significand bits with the hidden one, exponent of the smallest normal, largest
#: finite value, what overflow gives away from zero: "inf", "nan" or "max")
FLOATS = {
    "bf16": (8, -126, float.fromhex("0x1.fep127"), "inf", ml_dtypes.bfloat16),
    "f16": (11, -14, 65504.0, "inf", np.float16),
    "e4m3": (4, -6, 448.0, "nan", ml_dtypes.float8_e4m3fn),
    "e5m2": (3, -14, 57344.0, "inf", ml_dtypes.float8_e5m2),
    "e2m1": (2, 0, 6.0, "max", ml_dtypes.float4_e2m1fn),
}


def rounded(x: float, fmt: str, mode: str, saturate: bool) -> float:
    """``x`` rounded once into ``fmt`` (exponent unbounded above, then overflow)."""
    p, emin, fmax, over, _ = FLOATS[fmt]
    if x == 0:
        return x
    neg, a = x < 0, abs(Fraction(x))
    e = max(a.numerator.bit_length() - a.denominator.bit_length(), emin)
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - p + 1)
    k, frac = divmod(a / ulp, 1)
    up = {
        "rn": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and k % 2 == 1),
        "rna": frac >= Fraction(1, 2),
        "rz": False,
        "rm": frac > 0 and neg,
        "rp": frac > 0 and not neg,
    }[mode]
    r = (k + up) * ulp
    if r > Fraction(fmax):
        toward_zero = mode == "rz" or (mode == "rm" and not neg) or (mode == "rp" and neg)
        if saturate or toward_zero or over == "max":
            r = Fraction(fmax)
        else:
            return math.nan if over == "nan" else -math.inf if neg else math.inf
    return -float(r) if neg else float(r)


@examples(6, 60)
@given(
    x=st.floats(allow_nan=False, allow_infinity=False, width=64),
    fmt=st.sampled_from(sorted(FLOATS)),
    mode=st.sampled_from(["rn", "rna", "rz", "rm", "rp"]),
    saturate=st.booleans(),
)
def test_encode_rounds_a_double_once(x, fmt, mode, saturate):
    d = np.float64(x)
    bits = eager_and_jit(lambda: formats.encode(fmt, d, rounding=mode, saturate=saturate))
    dtype = FLOATS[fmt][4]
    got = np.asarray(bits).astype(np.uint8 if np.dtype(dtype).itemsize == 1 else np.uint16)
    value = float(got.view(dtype))
    want = rounded(x, fmt, mode, saturate)
    if math.isnan(want):
        assert math.isnan(value)
    else:
        assert value == want and math.copysign(1, value) == math.copysign(1, want)


@examples(4, 30)
@given(
    fmt=st.one_of(st.text(max_size=6), st.integers(), st.none()),
    rounding=st.one_of(st.text(max_size=6), st.integers()),
)
def test_encode_refuses_unknown_formats_and_modes(fmt, rounding):
    x = np.ones(2, np.float32)
    if fmt not in formats.FORMATS:
        same_error(lambda: formats.encode(fmt, x), ["fmt"])
    if rounding not in ("rn", "rna", "rz", "rm", "rp", "stochastic"):
        same_error(lambda: formats.encode("bf16", x, rounding=rounding), ["rounding"])


# ---- the instruction: matrix level and register level, against integer products -----
def small_values(rng, shape, dtype, lo=-4, hi=4):
    """Small integers in ``dtype`` (exact in every format here) and as int64."""
    v = rng.integers(lo, hi + 1, shape)
    return jnp.asarray(v.astype(np.float32)).astype(dtype), v


@examples(2, 20)
@given(text=st.sampled_from(sorted(DTYPES)), batch=st.sampled_from([(), (2,)]), s=st.integers(0, 9))
def test_mma_is_the_exact_product(text, batch, s):
    """Small integers: every product and sum is exact, so D is the integer product."""
    ins = jaxmma.instruction(text, arch=ARCH)
    rng = np.random.default_rng(s)
    ta, tb, tc = DTYPES[text]
    A, va = small_values(rng, batch + (ins.m, ins.k), ta)
    B, vb = small_values(rng, batch + (ins.k, ins.n), tb)
    C, vc = small_values(rng, batch + (ins.m, ins.n), tc, -64, 64)
    D = eager_and_jit(ins.mma, A, B, C)
    want = np.matmul(va, vb) + vc
    np.testing.assert_array_equal(D.astype(np.int64), want)
    regs = [ins.fragment(x, y) for x, y in (("a", A), ("b", B), ("c", C))]
    d = ins.unfragment("d", ins(*regs))  # the register level (raw bits): the same bits
    bits = D.view(f"u{D.itemsize}")
    np.testing.assert_array_equal(np.asarray(d).astype(bits.dtype), bits)


@examples(3, 20)
@given(
    text=st.sampled_from(sorted(DTYPES)),
    which=st.sampled_from("ABC"),
    bad=st.sampled_from(["shape", "dtype"]),
)
def test_mma_refuses_a_bad_operand_by_name(text, which, bad):
    ins = jaxmma.instruction(text, arch=ARCH)
    ta, tb, tc = DTYPES[text]
    ops = {
        "A": jnp.zeros((ins.m, ins.k), ta),
        "B": jnp.zeros((ins.k, ins.n), tb),
        "C": jnp.zeros((ins.m, ins.n), tc),
    }
    x = ops[which]
    ops[which] = jnp.zeros(x.shape[:-1] + (x.shape[-1] + 1,), x.dtype) if bad == "shape" else (
        jnp.zeros(x.shape, jnp.complex64)
    )  # fmt: skip
    same_error(lambda: ins.mma(ops["A"], ops["B"], ops["C"]), [which])


# ---- matmul with kernel options, against the integer product ---------------------------
def _leaves_a_slice_empty(rule, K, S, T):
    """The split rules as docs/gemm.md states them: cuBLAS deals whole k-tiles of T,
    ceil(tiles / S) to a slice; CUTLASS cuts ceil(K / S) rounded up to 4; XLA cuts K into
    S equal slices. A configuration whose last slice would start at or past K is refused."""
    if rule == "xla":
        return K % S != 0
    if rule == "cublas":
        tiles = math.ceil(K / T)
        return (S - 1) * math.ceil(tiles / S) >= tiles
    step = math.ceil(math.ceil(K / S) / 4) * 4
    return (S - 1) * step >= K


@examples(2, 25)
@given(
    dims=st.tuples(st.integers(1, 20), st.integers(1, 12), st.sampled_from([16, 48, 64])),
    split=st.tuples(st.integers(1, 3), st.sampled_from(["cublas", "cutlass", "xla"])),
    rounding=st.sampled_from([None, "rn", "rna", "rz"]),
    epilogue=st.sampled_from([None, "f32"]),
    out=st.sampled_from([None, jnp.bfloat16, jnp.float16]),
    s=st.integers(0, 9),
)
def test_matmul_with_kernel_options_is_the_exact_product(dims, split, rounding, epilogue, out, s):
    """Small integers (float32 inputs): whatever the options, the sum is exact."""
    M, N, K = dims
    rng = np.random.default_rng(s)
    A, va = small_values(rng, (M, K), jnp.float32, -3, 3)
    B, vb = small_values(rng, (K, N), jnp.float32, -3, 3)
    C, vc = small_values(rng, (M, N), jnp.float32, -8, 8)
    S, rule = split
    kw = dict(split_k=S, split_rule=rule, input_rounding=rounding, epilogue=epilogue)
    call = lambda a, b, c: jaxmma.matmul(  # noqa: E731
        a, b, c, instruction=BF16, arch=ARCH, out_dtype=out, **kw
    )
    if _leaves_a_slice_empty(rule, K, S, T=16):
        with pytest.raises(ValueError, match="split_k"):
            call(A, B, C)
        return
    D = eager_and_jit(call, A, B, C)
    np.testing.assert_array_equal(D.astype(np.int64), np.matmul(va, vb) + vc)


BAD_OPTIONS = [
    ("split_k", 0), ("split_k", -2), ("split_k", "2"), ("split_k", 2.5),
    ("k_tile", 7), ("k_tile", "64"), ("split_rule", "cuda"), ("split_reduce", "tree"),
    ("split_reduce", (0, 0)), ("input_rounding", "rne"), ("rounding", 1),
    ("epilogue", "bf16"), ("alpha", "2"), ("beta", [1.0]), ("out_dtype", "int8"),
    ("convert_inputs", "f32"), ("promote_every", 0), ("promote_every", "4"),
    ("executor", "cuda"), ("key", 3),
]  # fmt: skip


@examples(4, 40)
@given(bad=st.sampled_from(BAD_OPTIONS))
def test_matmul_refuses_bad_options_by_name(bad):
    name, value = bad
    A, B = jnp.ones((16, 32), jnp.float32), jnp.ones((32, 8), jnp.float32)
    kw = {name: value}
    if name in ("alpha", "beta"):
        kw["epilogue"] = "f32"
    if name in ("split_reduce", "k_tile"):
        kw["split_k"] = 2
    same_error(lambda: jaxmma.matmul(A, B, instruction=BF16, arch=ARCH, **kw), [name])


# ---- quantizers: exact values survive, bad arguments are named ------------------------
def dequantized(q) -> np.ndarray:
    """element * scale * global scale in float64, decoded by ml_dtypes."""
    dt = {
        "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e3m2": "float6_e3m2fn",
        "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn", "ue8m0": "float8_e8m0fnu",
        "ue4m3": "float8_e4m3fn",
    }  # fmt: skip
    e = np.asarray(q.elements, np.uint8).view(getattr(ml_dtypes, dt[q.fmt])).astype(np.float64)
    s = np.asarray(q.scales, np.uint8).view(getattr(ml_dtypes, dt[q.scale_fmt])).astype(np.float64)
    g = 1.0 if q.global_scale is None else float(np.asarray(q.global_scale))
    return e * np.repeat(s, q.block, axis=q.axis) * g


@examples(3, 25)
@given(
    nvfp4=st.booleans(),
    fmt=st.sampled_from(["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"]),
    rows=st.integers(1, 4),
    blocks=st.integers(1, 3),
    s=st.integers(0, 99),
)
def test_quantizers_keep_exact_values(nvfp4, fmt, rows, blocks, s):
    """Values that every format holds after a power-of-two scale come back exactly."""
    rng = np.random.default_rng(s)
    block = 16 if nvfp4 else 32
    shape = (rows, blocks * block)
    sign = rng.choice([-1.0, 1.0], shape)
    if nvfp4:  # global scale 1: blocks of {0, 1.5, 3, 6} * 2**j have exact ue4m3 scales
        x = rng.choice([0.0, 1.5, 3.0, 6.0], shape) * sign * 2.0 ** rng.integers(-2, 3)
        x = x.astype(np.float32)
        q = quant.quantize_nvfp4(x, global_scale=1.0)
        jq = jax.jit(lambda v: quant.quantize_nvfp4(v, global_scale=1.0))(x)
    else:
        x = rng.choice([0.0, 1.0, 2.0, 4.0], shape) * sign * 2.0 ** rng.integers(-3, 4)
        x = x.astype(np.float32)
        q = quant.quantize_mx(x, fmt)
        jq = jax.jit(lambda v: quant.quantize_mx(v, fmt))(x)
    np.testing.assert_array_equal(dequantized(q), x)
    np.testing.assert_array_equal(np.asarray(jq.elements), np.asarray(q.elements))
    np.testing.assert_array_equal(np.asarray(jq.scales), np.asarray(q.scales))


BAD_QUANT = [
    ("fmt", "e4m4"), ("fmt", 3), ("axis", 5), ("axis", 1.0), ("block", 0), ("block", "32"),
    ("scale_rounding", "up"), ("saturate", "yes"), ("rounding", "rz"),
]  # fmt: skip


@examples(3, 30)
@given(bad=st.sampled_from(BAD_QUANT), nvfp4=st.booleans())
def test_quantizers_refuse_bad_arguments_by_name(bad, nvfp4):
    name, value = bad
    x = jnp.ones((2, 64), jnp.float32)
    if nvfp4 and name != "fmt":
        same_error(lambda: quant.quantize_nvfp4(x, **{name: value}), [name])
    elif not nvfp4:
        kw = {} if name == "fmt" else {name: value}
        same_error(lambda: quant.quantize_mx(x, value if name == "fmt" else "e4m3", **kw), [name])


# ---- scaled_dot_general: exact values give the float64 product ------------------------
@examples(1, 15)
@given(mode=st.sampled_from(["mxfp8", "nvfp4"]), m=st.integers(1, 20), s=st.integers(0, 99))
def test_scaled_dot_general_is_the_exact_product(mode, m, s):
    rng = np.random.default_rng(s)
    vals = [0.0, 1.0, 2.0, 4.0] if mode == "mxfp8" else [0.0, 1.5, 3.0, 6.0]
    x = (rng.choice(vals, (1, m, 64)) * rng.choice([-1.0, 1.0], (1, m, 64))).astype(np.float32)
    w = (rng.choice(vals, (1, 8, 64)) * rng.choice([-1.0, 1.0], (1, 8, 64))).astype(np.float32)
    cfg = jax.nn.get_scaled_dot_general_config(mode)
    dn = (((2,), (2,)), ((0,), (0,)))
    got = eager_and_jit(lambda a, b: jaxmma.scaled_dot_general(a, b, dn, configs=[cfg] * 2), x, w)
    want = np.einsum("bmk,bnk->bmn", x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_quantize_nvfp4_of_a_constant_under_jit():
    """The example hypothesis found (scaled_dot_general, nvfp4, s=32), cut down: with its
    input a jit constant, quantize_nvfp4 along axis=-2 gave other elements than eagerly
    (XLA's constant folding of the quantizer; an optimization barrier keeps it out)."""
    rng = np.random.default_rng(32)
    rng.choice([0.0, 1.5, 3.0, 6.0], (1, 1, 64)), rng.choice([-1.0, 1.0], (1, 1, 64))  # x first
    w = rng.choice([0.0, 1.5, 3.0, 6.0], (1, 8, 64)) * rng.choice([-1.0, 1.0], (1, 8, 64))
    w = w.astype(np.float32)

    def f():
        x = jnp.swapaxes(jnp.asarray(w), -1, -2)
        return quant.quantize_nvfp4(x, axis=-2, global_scale=jnp.ones((), jnp.float32)).elements

    np.testing.assert_array_equal(np.asarray(jax.jit(f)()), np.asarray(f()))


@examples(3, 20)
@given(
    i=st.integers(0, 1),
    field=st.sampled_from(["mode", "block_size", "data_type", "scale_type"]),
    value=st.sampled_from(["int8", 7, None, "nvfp5"]),
)
def test_scaled_dot_general_names_the_bad_config(i, field, value):
    cfg = jax.nn.get_scaled_dot_general_config("mxfp8")
    bad = type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__}, field: value})
    configs = [cfg, cfg]
    configs[i] = bad
    x, w = jnp.ones((1, 16, 64)), jnp.ones((1, 8, 64))
    dn = (((2,), (2,)), ((0,), (0,)))
    same_error(lambda: jaxmma.scaled_dot_general(x, w, dn, configs=configs), [f"configs[{i}]"])


# ---- tcgen05 text and descriptors --------------------------------------------------------
TCGEN05 = jaxmma.all_instructions("tcgen05.mma")


@examples(5, 60)
@given(i=st.integers(0, len(TCGEN05) - 1))
def test_tcgen05_text_round_trips_and_mutations_are_named(i):
    ins = TCGEN05[i]
    assert jaxmma.instruction(ins.text, arch=ins.arch) == ins
    head = re.search(r"\.(kind::\w+)", ins.text).group(1)
    for bad, token in (
        (ins.text.replace(f".{head}", f".{head}.{head}"), "kind"),
        (ins.text.replace(f".{head}", ".kind::f17"), "kind::f17"),
        (re.sub(r"\.m(\d+)n", ".m7n", ins.text), "m7n"),
        (ins.text + ".junk", "junk"),
    ):
        with pytest.raises(ValueError) as e:
            jaxmma.instruction(bad, arch=ins.arch)
        assert token in str(e.value), str(e.value)[:300]
    if ins.kind in ("f16", "tf32", "f8f6f4", "i8") and ".sp." not in ins.text:
        group = int(re.search(r"cta_group::(\d)", ins.text).group(1))
        again = jaxmma.tcgen05_instruction(ins.idesc, kind=ins.kind, cta_group=group, arch=ins.arch)
        assert again.text == ins.text


@examples(4, 40)
@given(
    name=st.sampled_from(["kind", "cta_group", "scale_vec", "idesc"]),
    value=st.one_of(st.text(max_size=8), st.integers(-3, 2**33), st.floats(), st.none()),
)
def test_tcgen05_descriptor_arguments_are_named(name, value):
    kw = dict(idesc=0x08400490, kind="f16")
    kw[name] = value
    try:
        jaxmma.tcgen05_instruction(kw.pop("idesc"), **kw)
    except (ValueError, TypeError) as e:
        assert name in str(e) or "idesc" in str(e), str(e)[:300]
