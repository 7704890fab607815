"""x64 on or off gives the same bits: a sampled sweep run once more with ``jax_enable_x64``.

``jax_enable_x64`` is global, so the sweep runs in a child process started with
``JAX_ENABLE_X64=1`` (this file run as a script), which saves its outputs; this process
(x64 off, as the rest of the suite) checks them bit for bit:

* one record of each family's golden file (tests/golden/sm_90: bf16, f16, tf32, fp8,
  sparse, ordered-metadata sparse, integer, b1, f64, wgmma, wmma) against the hardware;
* forms without golden files (the fp8 models of sm_89 and sm_100, ``kind::f8f6f4`` fp6 /
  fp4, the block-scaled ``mxf8f6f4``, ``mxf4``, ``mxf4nvf4``) against the same call here;
* GEMMs: a chained fp8 golden GEMM with promotion against the hardware; ``matmul`` /
  ``dot_general`` with ``promote_every`` and block-scaled float inputs (quantized inside)
  against the same call here;
* ``formats.encode`` / ``decode`` and the quantizers against the same call here.

The quick run takes one of the golden forms, one of the other forms and three of the
seven other parts of the sweep (drawn with ``JAXMMA_TEST_SEED``, tests/_suite.py); the full
sweep takes all of them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from _suite import sample

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden", "sm_90")

#: (golden file, the record's text): one form of each family, captured on an sm_90 GPU
GOLDEN_FORMS = [
    ("mma-bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    ("mma-tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("mma-fp8", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32"),
    ("mma_sp-f16", "mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    ("mma-i8", "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32"),
    ("mma-b1", "mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32.and.popc"),
    ("mma-f64", "mma.sync.aligned.m16n8k4.row.col.rm.f64.f64.f64.f64"),
]
#: wgmma's golden file (its own layout, see tests/test_wgmma.py): its first fp8 record
WGMMA_FILE = os.path.join(GOLDEN, "wgmma-sm_90a.npz")

#: (text, arch): forms without golden files, compared with the same call with x64 off
FORMS = [
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "sm_89"),
    ("mma.sync.aligned.m16n8k16.row.col.f16.e5m2.e4m3.f16", "sm_100"),
    ("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e3m2.e2m1.f32", "sm_120a"),
    (
        "mma.sp::ordered_metadata.sync.aligned.m16n8k128.row.col.kind::mxf4nvf4.block_scale"
        ".scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3",
        "sm_120a",
    ),
]
WARPS = 8
BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
GEMM_KEY_PART = "e4m3.e4m3.f32|P=4|S=7|"  # the chained fp8 golden GEMM, promoted every 4 steps


def golden_forms():
    """This run's golden forms: one of them in the quick run, all in the full sweep."""
    return sample(GOLDEN_FORMS, lambda f: 0, salt="x64-golden")


def forms():
    """This run's forms without golden files: one in the quick run, all in the full sweep."""
    return sample(FORMS, lambda f: 0, salt="x64-forms")


#: the parts of :func:`sweep`; the quick run takes one of each row, the full sweep all
SECTIONS = [("forms", "gemm"), ("block", "sparse"), ("formats", "doubles", "double rules")]


def sections() -> set:
    """This run's parts of :func:`sweep` (the same in both processes: the seed and the
    mode travel in the environment)."""
    rows = [(name, i) for i, row in enumerate(SECTIONS) for name in row]
    return {name for name, _ in sample(rows, lambda r: r[1], salt="x64-sweep")}


def _golden_record(group, text):
    from jaxmma import conformance

    for rec in conformance.load_golden(os.path.join(GOLDEN, f"{group}.npz")):
        if rec.text == text:
            return rec
    raise LookupError(f"{text!r} is not in {group}.npz")


def _wgmma_record():
    """``(text, imm, {a, b, c, d, scale_d})`` of the first fp8 record of the wgmma file."""
    import json

    with np.load(WGMMA_FILE) as z:
        for j in range(len(z.files) // 6):
            rec = json.loads(str(z[f"{j}.text"]))
            if "e4m3" in rec["text"]:
                return (
                    rec["text"],
                    rec["imm"],
                    {x: z[f"{j}.{x}"] for x in "a b c d scale_d".split()},
                )
    raise LookupError("e4m3")


def _wgmma(text, imm, arrays):
    """D of the wgmma record (raw bits), warpgroups with scale-d true first."""
    import jax.numpy as jnp

    import jaxmma

    ins = jaxmma.instruction(text, arch="sm_90a")
    scale_a, scale_b = (imm + [1, 1])[:2]
    out = []
    for flag in (1, 0):
        idx = np.nonzero(arrays["scale_d"] == flag)[0]
        abc = (jnp.asarray(arrays[x][idx].astype(np.uint32)) for x in "abc")
        d = ins.mma(*abc, scale_d=bool(flag), scale_a=scale_a, scale_b=scale_b)
        out.append(_bits(d))
    return np.concatenate(out)


def _gemm_record():
    from jaxmma import conformance
    from jaxmma.conformance import _gemm

    for path in _gemm.golden_files(GOLDEN):
        for rec in conformance.load_golden(path):
            if GEMM_KEY_PART in rec.meta["key"]:
                return rec
    raise LookupError(GEMM_KEY_PART)


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(f"uint{8 * x.dtype.itemsize}") if x.dtype.kind != "u" else x


def golden_sweep() -> dict:
    """The outputs of the golden forms and the golden GEMM (raw bits, by name); the f64
    form runs under ``jax.enable_x64`` whatever the process's setting."""
    import jax

    import jaxmma
    from jaxmma import conformance
    from jaxmma.conformance import _compare, _gemm

    out = {"wgmma": _wgmma(*_wgmma_record())}
    for rec in (_golden_record(g, t) for g, t in golden_forms()):
        vec = conformance.regenerate_inputs(rec)
        with jax.enable_x64(_compare._needs_x64(vec, rec.outputs) or jax.config.jax_enable_x64):
            emu = _compare.emulate(rec.instruction(), vec)
        for name, v in emu.items():
            out[f"golden|{rec.text}|{name}"] = _bits(v)
    rec = _gemm_record()
    case, problem = _gemm.case_of(rec), _gemm.regenerate(rec)
    D = jaxmma.matmul(
        problem.A, problem.B, problem.C, instruction=case.instruction(), promote_every=4
    )
    out["gemm-golden"] = _bits(D)
    return out


def sweep() -> dict:
    """The outputs of the forms without golden files, GEMMs, quantizers and formats (raw
    bits, by name), compared between the two processes."""
    import functools

    import jax
    import jax.numpy as jnp

    import jaxmma
    from jaxmma import conformance, formats, quant
    from jaxmma.conformance import _compare

    out = {}
    take = sections()
    for text, arch in forms() if "forms" in take else ():
        ins = jaxmma.instruction(text, arch=arch)
        for name, v in _compare.emulate(ins, conformance.inputs(ins, 1, WARPS)).items():
            out[f"form|{text}|{arch}|{name}"] = _bits(v)
    rng = np.random.default_rng(20)
    x = jnp.asarray(rng.standard_normal((2, 24, 96), np.float32))
    w = jnp.asarray(rng.standard_normal((96, 40), np.float32) * 3)
    dg = functools.partial(
        jaxmma.dot_general,
        instruction="mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        arch="sm_90",
        promote_every=2,
    )
    if "gemm" in take:
        out["dot_general-promote"] = _bits(dg(x, w, (((2,), (0,)), ((), ()))))
    mx = (
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e2m1.e4m3.f32.ue8m0"
    )
    if "block" in take:
        out["matmul-quantize-mx"] = _bits(jaxmma.matmul(x[0], w, instruction=mx))
    # FMUL (the int32 multiply) in a scaled epilogue with alpha
    e4 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
    sa, sb = jnp.float32(2.0**-130), jnp.float32(3.0)  # subnormal products included
    if "gemm" in take:
        scaled = jaxmma.matmul(x[0], w, instruction=e4, arch="sm_90", scale_a=sa, scale_b=sb)
        out["matmul-scaled"] = _bits(scaled)
    # sparse structure: prune (an argsort, int64 under x64) and an eager sparse mma
    sp = jaxmma.instruction(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32", arch="sm_90"
    )
    if "sparse" in take:
        pruned = jaxmma.sparse.prune(sp, x[0, :16, :32].astype(jnp.bfloat16))
        c = jnp.zeros((16, 8), jnp.float32)
        out["sparse-prune-mma"] = _bits(sp.mma(pruned, w[:32, :8].astype(jnp.bfloat16), c))
    if "block" in take:
        q = quant.quantize_nvfp4(x, global_scale=jnp.float32(0.5))
        out["quantize_nvfp4"] = np.concatenate([_bits(q.elements).ravel(), _bits(q.scales).ravel()])

    # formats: roundings of a spread of float32 values into element formats, in one program
    v = rng.standard_normal(512) * np.exp2(rng.integers(-30, 30, 512))
    v = np.concatenate([v, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]]).astype(np.float32)
    rbits = rng.integers(0, 2**32, v.shape, np.uint64).astype(np.uint32)
    cases = [(f, r) for f in ("bf16", "e4m3", "e2m1", "s8") for r in ("rn", "rz", "stochastic")]
    cases.append(("ue8m0", "rp"))

    def encode_all(v, rbits):
        return [
            formats.encode(
                f,
                v,
                rounding=r,
                saturate=f != "bf16",
                random_bits=rbits if r == "stochastic" else None,
            )
            for f, r in cases
        ] + [formats.decode(f, jnp.arange(256, dtype=jnp.uint32)) for f in ("e5m2", "e2m3")]

    for i, bits in enumerate(jax.jit(encode_all)(v, rbits) if "formats" in take else ()):
        out[f"formats|{i}"] = _bits(bits)

    # doubles (docs/dtypes.md): rounded from float64 with x64 on; with x64 off rounded to
    # odd into float32 first: the same bits. Near ties of bf16 and e4m3, and anywhere
    near = np.float32(1 + 2**-8) * np.exp2(rng.integers(-20, 20, 64)).astype(np.float32)
    d = np.concatenate(
        [
            rng.standard_normal(256) * np.exp2(rng.integers(-140, 130, 256)),
            near.astype(np.float64) * (1 + rng.choice([-1, 1], 64) * 2.0**-40),
            [1 + 2**-4 + 2**-40, -(1 + 2**-4 - 2**-40), 1e300, -1e-300, 0.0, -0.0],
        ]
    )
    if "doubles" in take:
        for fmt, rounding in (("bf16", "rn"), ("bf16", "rz"), ("e4m3", "rna"), ("e2m1", "rp")):
            out[f"double|{fmt}|{rounding}"] = _bits(
                formats.encode(fmt, d, rounding=rounding, saturate=fmt != "bf16")
            )
        out["double|f32|rn"] = _bits(formats.encode("f32", d))
        out["double|matmul"] = _bits(
            jaxmma.matmul(
                d[:256].reshape(16, 16), np.eye(16)[:, :8], instruction=BF16, arch="sm_90"
            )
        )
    if "double rules" in take:
        out.update(double_rule_sweep(d, rng))
    return out


def _error_name(fn) -> np.ndarray:
    """The type of the exception ``fn()`` raises, as bytes (b"none" when it returns)."""
    try:
        fn()
    except (TypeError, ValueError) as e:
        return np.frombuffer(type(e).__name__.encode(), np.uint8)
    return np.frombuffer(b"none", np.uint8)


def double_rule_sweep(d, rng) -> dict:
    """The one float64 rule (docs/dtypes.md) on host doubles: every rounding mode of
    ``formats.encode``, the GEMM's input roundings (tf32 included), stochastic rounding,
    an epilogue's C, Python-float scales, and the cases refused with x64 on and off."""
    import jax
    import jax.numpy as jnp

    import jaxmma
    from jaxmma import formats, quant

    out = {}
    for fmt, rounding, sat in (
        ("f32", "rz", False), ("f32", "rna", False), ("f32", "rm", True), ("s8", "rz", False),
        ("u4", "rp", True), ("tf32", "rz", False), ("e5m2", "rm", False),
    ):  # fmt: skip
        bits = formats.encode(fmt, d, rounding=rounding, saturate=sat)
        out[f"double|{fmt}|{rounding}|{sat}"] = _bits(bits)
    g = rng.standard_normal((16, 16)) * (1 + rng.choice([-1.0, 1.0], (16, 16)) * 2.0**-40)
    eye = np.eye(16)[:, :8]
    tf32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    kw = dict(arch="sm_90")
    out["double|matmul|rz"] = _bits(
        jaxmma.matmul(g, eye, instruction=BF16, input_rounding="rz", **kw)
    )
    out["double|matmul|tf32-rz"] = _bits(
        jaxmma.matmul(g, eye, instruction=tf32, input_rounding="rz", **kw)
    )
    dn = (((1,), (0,)), ((), ()))
    out["double|dot_general|rna"] = _bits(
        jaxmma.dot_general(g, eye, dn, instruction=BF16, input_rounding="rna", **kw)
    )
    g32 = g.astype(np.float32).astype(np.float64)
    out["double|matmul|stochastic"] = _bits(
        jaxmma.matmul(
            g32, eye, instruction=BF16, rounding="stochastic", key=jax.random.key(1), **kw
        )
    )
    z = np.zeros((16, 16), np.float32)
    out["double|matmul|epilogue-c"] = _bits(
        jaxmma.matmul(
            z, z[:, :8], g[:, :8], instruction=BF16, epilogue="f32", out_dtype=jnp.bfloat16, **kw
        )
    )
    e4 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
    x8 = rng.standard_normal((16, 32)).astype(np.float32)
    out["double|matmul|scales"] = _bits(
        jaxmma.matmul(x8, x8.T[:, :8], instruction=e4, scale_a=0.1, scale_b=np.float64(3.0), **kw)
    )
    cfg = jax.nn.get_scaled_dot_general_config("mxfp8")
    x3 = g32[None, :, :].repeat(2, axis=-1)  # (1, 16, 32): doubles float32 holds
    out["double|scaled_dot_general"] = _bits(
        jaxmma.scaled_dot_general(x3, x3[:, :8], (((2,), (2,)), ((0,), (0,))), configs=[cfg] * 2)
    )
    refused = {
        "stochastic": lambda: jaxmma.matmul(
            g, eye, instruction=BF16, rounding="stochastic", key=jax.random.key(1), **kw
        ),
        "s32": lambda: formats.encode("s32", np.float64(2**30 + 1.25)),
        "quantize_mx": lambda: quant.quantize_mx(g[:, :16].repeat(2, 1), "e4m3"),
        "scaled_dot_general": lambda: jaxmma.scaled_dot_general(
            g[None].repeat(2, -1), g[None, :8].repeat(2, -1), (((2,), (2,)), ((0,), (0,))),
            configs=[cfg] * 2,
        ),
    }  # fmt: skip
    for name, fn in refused.items():
        out[f"double|error|{name}"] = _error_name(fn)
    return out


def test_x64_gives_the_same_bits(tmp_path):
    path = tmp_path / "x64.npz"
    env = dict(os.environ, JAX_ENABLE_X64="1", PYTHONPATH=os.path.dirname(HERE))
    run = subprocess.run(
        [sys.executable, __file__, str(path)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with np.load(path) as z:
        on = {k: z[k] for k in z.files}

    import jax

    assert not jax.config.jax_enable_x64
    off = sweep()
    assert set(off) <= set(on)
    failures = []
    text, _, arrays = _wgmma_record()
    flags = arrays["scale_d"]
    hw = np.concatenate([arrays["d"][flags == 1], arrays["d"][flags == 0]])
    if not np.array_equal(on["wgmma"], hw):
        failures.append(f"wgmma {text}: x64 on differs from the hardware")
    for group, text in golden_forms():
        rec = _golden_record(group, text)
        for name, hw in rec.outputs.items():
            key = f"golden|{rec.text}|{name}"
            if not np.array_equal(on[key], _bits(hw)):
                failures.append(f"{key}: x64 on differs from the hardware")
    from jaxmma.conformance import _gemm

    rec = _gemm_record()
    case = _gemm.case_of(rec)
    hw = _gemm.untile(case, np.asarray(case.instruction().unfragment("d", rec.outputs["d"])))
    if not np.array_equal(on["gemm-golden"], _bits(hw)):
        failures.append("gemm-golden: x64 on differs from the hardware")
    for key in sorted(off):
        if on[key].dtype != off[key].dtype or not np.array_equal(on[key], off[key]):
            failures.append(f"{key}: x64 on differs from x64 off")
    refused = [k for k in off if k.startswith("double|error|")]
    failures += [f"{k}: not a TypeError" for k in refused if bytes(off[k]) != b"TypeError"]
    assert not failures, "\n".join(failures)
    per_part = {"forms": len(forms()), "gemm": 2, "block": 2, "sparse": 1, "formats": 15}
    per_part.update({"doubles": 6, "double rules": 7 + 7 + 4})
    assert len(off) == sum(per_part[name] for name in sections())


if __name__ == "__main__":  # the child process: x64 on
    import jax

    assert jax.config.jax_enable_x64, "run with JAX_ENABLE_X64=1"
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")
    np.savez(sys.argv[1], **golden_sweep(), **sweep())
