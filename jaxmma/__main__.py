"""``python -m jaxmma``: what the emulator shows about low-precision GEMMs, in about a minute.

1. The instruction table: every family of PTX ISA 9.7.14, its form count, and the
   architectures that run it.
2. A GEMM as an H100 kernel computes it: a 256 x 256 x 256 bf16 and an e4m3 product
   through ``jaxmma.matmul`` with the sm_90 ``mma.sync`` arithmetic, and the e4m3 product
   with Hopper's ``wgmma`` (the instruction cuBLAS and CUTLASS 3 run fp8 on), without and
   with promotion to f32 every 4 k-steps (DeepSeek-V3's 128 elements of K), against the
   exact product: the error, and how many results differ in their bits from a plain
   float32 matmul and from the exactly rounded product.
3. An NVFP4 GEMM (the sm_120 block-scaled ``mma``), beside MXFP8 on the same data.
4. A figure of both, written to ``out/demo.png`` (the path is printed).
5. Bit-exact conformance on a sample of the hardware golden vectors (``tests/golden``),
   one form per family; the full sweep is ``python -m jaxmma.conformance check``.
"""

from __future__ import annotations

import collections
import os
import sys
import time

import numpy as np

import jaxmma
from jaxmma.conformance import __main__ as conf
from jaxmma.spec import _ptx, _spec

ARCHS = ("sm_70", "sm_75", "sm_80", "sm_89", "sm_90", "sm_100a", "sm_120a")
SIZE = 256  # M = N = K of the demo GEMMs
SAMPLE = 8  # golden forms checked by the demo
WGMMA_E4M3 = "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
GEMMS = (  # (label, instruction, arch, element dtype name, promote_every)
    (
        "bf16 mma.sync",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "sm_90",
        "bfloat16",
        None,
    ),
    (
        "e4m3 mma.sync",
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "sm_90",
        "float8_e4m3fn",
        None,
    ),
    ("e4m3 wgmma", WGMMA_E4M3, "sm_90a", "float8_e4m3fn", None),
    ("e4m3 wgmma, promote_every=4", WGMMA_E4M3, "sm_90a", "float8_e4m3fn", 4),
)
NVFP4 = (
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
MXFP8 = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0"
)


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _family(form) -> str:
    name = form.opcode + (f".{form.sparse}" if form.sparse else "")
    if form.opcode in ("mma", "wmma.mma", "wmma.load", "wmma.store"):
        t = form.atype or form.btype or form.ctype or form.dtype
        if form.kind:
            t = f"kind::{form.kind}"
        elif t in ("e4m3", "e5m2"):
            t = "fp8"
        elif t in ("s8", "u8"):
            t = "s8/u8"
        elif t in ("s4", "u4"):
            t = "s4/u4"
        return f"{name} .{t}" if not t.startswith("kind") else f"{name} .{t}"
    return name


def catalogue() -> None:
    print("== 1. The instruction table (PTX ISA 9.7.14): forms each architecture runs ==")
    rows = collections.OrderedDict()
    for f in _spec.FORMS:
        rows.setdefault(_family(f), []).append(f)
    print(f"{'family':44s} {'texts':>5s}  " + " ".join(f"{a:>7s}" for a in ARCHS))
    for fam, forms in rows.items():
        runs = []
        for a in ARCHS:
            arch = _ptx.parse_arch(a)
            n = sum(f.variants for f in forms if _ptx.runs_on(f, arch))
            runs.append(f"{n:7d}" if n else f"{'-':>7s}")
        print(f"{fam:44s} {sum(f.variants for f in forms):5d}  " + " ".join(runs))
    print(f"{'total':44s} {_spec.count_variants():5d}")
    print()


def _ulps(x, y):
    """Distance in units of the last place between float32 arrays (same sign assumed)."""
    xi = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
    yi = np.asarray(y, np.float32).view(np.int32).astype(np.int64)
    xi = np.where(xi < 0, -(xi & 0x7FFFFFFF), xi)
    yi = np.where(yi < 0, -(yi & 0x7FFFFFFF), yi)
    return np.abs(xi - yi)


def _rel(x, ref) -> float:
    return float(np.linalg.norm(np.asarray(x, np.float64) - ref) / np.linalg.norm(ref))


def gemms(bar) -> dict:
    """Section 2: bf16 and e4m3 GEMMs emulated as sm_90 mma.sync kernels."""
    import jax
    import jax.numpy as jnp

    bar.write(f"== 2. A {SIZE}^3 GEMM as an H100 kernel computes it (standard normal inputs) ==")
    out = {}
    inputs = {}
    for label, text, arch, dtype, promote in GEMMS:
        if dtype not in inputs:
            ka, kb = jax.random.split(jax.random.fold_in(jax.random.key(0), len(inputs)))
            A = jax.random.normal(ka, (SIZE, SIZE), jnp.float32).astype(getattr(jnp, dtype))
            B = jax.random.normal(kb, (SIZE, SIZE), jnp.float32).astype(getattr(jnp, dtype))
            inputs[dtype] = (A, B)
        A, B = inputs[dtype]
        A64, B64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
        exact = A64 @ B64  # every product and sum exact in float64 for K = 256
        bar.set_postfix_str(label)
        t0 = time.perf_counter()
        ins = jaxmma.instruction(text, arch=arch)
        D = np.asarray(jaxmma.matmul(A, B, instruction=ins, promote_every=promote))
        seconds = time.perf_counter() - t0
        bar.update()
        naive = np.asarray(A64.astype(np.float32) @ B64.astype(np.float32))  # float32 BLAS
        rounded = exact.astype(np.float32)  # the exact product, rounded once
        u = _ulps(D, rounded)
        # the error against the scale of the sum: |D - exact| / sum_k |a_k b_k|, in 2^-24
        scale = np.abs(A64) @ np.abs(B64)
        worst = float(np.max(np.abs(D - exact) / scale) / 2.0**-24)
        out[label] = {"D": D, "exact": exact, "ulps": u}
        bar.write(
            f"  {label} ({arch}): {text}\n"
            f"      {seconds:4.1f} s; relative error {_rel(D, exact):.2e} vs the exact product;"
            f" bits differ from a float32 matmul in {int((D != naive).sum())} and from the"
            f" exactly rounded product in {int((u > 0).sum())} of {D.size} results;"
            f" largest error {worst:.3g} x 2^-24 x sum|a b|"
        )
    bar.write("")
    return out


def block_scaled(bar) -> dict:
    """Section 3: NVFP4 and MXFP8 GEMMs through the sm_120 block-scaled mma."""
    import jax
    import jax.numpy as jnp

    bar.write(f"== 3. Block-scaled {SIZE}^3 GEMMs: NVFP4 and MXFP8 (sm_120a mma.block_scale) ==")
    kx, ky = jax.random.split(jax.random.key(1))
    X = jax.random.normal(kx, (SIZE, SIZE), jnp.float32)
    Y = jax.random.normal(ky, (SIZE, SIZE), jnp.float32)
    ref = np.asarray(X, np.float64) @ np.asarray(Y, np.float64)
    out = {"ref": ref}
    recipes = (
        ("NVFP4", NVFP4, lambda x, ax: jaxmma.quant.quantize_nvfp4(x, axis=ax)),
        ("MXFP8", MXFP8, lambda x, ax: jaxmma.quant.quantize_mx(x, "e4m3", axis=ax)),
    )
    for label, text, quantize in recipes:
        bar.set_postfix_str(f"{label} GEMM")
        t0 = time.perf_counter()
        qx, qy = quantize(X, -1), quantize(Y, -2)
        D = np.asarray(jaxmma.matmul(qx, qy, instruction=jaxmma.instruction(text)))
        # (matmul applies NVFP4's per-tensor scales itself, as a kernel epilogue does)
        bar.update()
        seconds = time.perf_counter() - t0
        deq = np.asarray(jaxmma.quant.dequantize(qx), np.float64) @ np.asarray(
            jaxmma.quant.dequantize(qy), np.float64
        )
        out[label] = D
        bar.write(
            f"  {label:5s} {seconds:5.1f} s; relative error {_rel(D, ref):.3f} vs the float32"
            f" inputs' exact product ({_rel(deq, ref):.3f} from quantization alone,"
            f" {_rel(D, deq):.1e} from the instruction's arithmetic)"
        )
    bar.write("")
    return out


def figure(dense: dict, scaled: dict) -> str:
    """Section 4: out/demo.png (needs matplotlib, installed with the ``test`` extra)."""
    try:
        import matplotlib
    except ImportError:
        print("== 4. Figure: skipped (matplotlib is not installed)\n")
        return ""

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = os.path.join(_root(), "out", "demo.png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    nbins = 0
    for label, r in dense.items():
        u = r["ulps"]
        b = np.where(u == 0, 0, np.floor(np.log2(np.maximum(u, 1))).astype(int) + 1)
        nbins = max(nbins, int(b.max()) + 1)
        counts = np.bincount(b.ravel(), minlength=nbins)
        vals = np.nonzero(counts)[0]
        ax.plot(vals, counts[vals] / u.size, "o-", label=label)
    ticks = range(0, nbins, max(1, nbins // 8))
    ax.set_xticks(list(ticks))
    ax.set_xticklabels(["0" if t == 0 else f"2^{t - 1}" for t in ticks], fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("ulps from the exactly rounded product (bins [2^j, 2^(j+1)))")
    ax.set_ylabel("fraction of the results")
    ax.set_title(f"{SIZE}^3 GEMMs as an H100 computes them", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    ref = scaled["ref"].ravel()
    for label in ("MXFP8", "NVFP4"):
        if label in scaled:
            ax.hist(scaled[label].ravel() - ref, bins=80, histtype="step", label=label)
    ax.set_xlabel("result - exact product of the float32 inputs")
    ax.set_ylabel("results")
    ax.set_title("Block-scaled GEMMs (sm_120a): error of every result", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"== 4. Figure: {path}")
    print()
    return path


def conformance() -> int:

    golden = os.path.join(_root(), "tests", "golden", "sm_90")
    print("== 5. Bit-exact against the H100: a sample of the golden forms, one per family ==")
    if not os.path.isdir(golden) or not any(n.endswith(".npz") for n in os.listdir(golden)):
        print(f"(no golden files under {golden})")
        return 0
    records, broken = conf.golden_records(golden, sample=SAMPLE)
    results = broken + conf.check_records(records, quiet=True, desc="golden sample")
    eq = sum(r.equal for r in results)
    tot = sum(r.total for r in results)
    ok = sum(r.status == "ok" for r in results)
    print(f"  {ok}/{len(results)} forms bit-exact ({eq}/{tot} output registers or bytes)")
    print("  the full sweep (455 forms): python -m jaxmma.conformance check")
    return 1 if any(r.failed for r in results) else 0


def main() -> int:
    from tqdm import tqdm

    t0 = time.perf_counter()
    print(f"jaxmma {jaxmma.__version__}: NVIDIA warp-level matrix instructions, bit-exact, in JAX")
    print()
    catalogue()
    if not hasattr(jaxmma, "matmul"):
        print("(jaxmma.matmul is not in this build: the GEMM sections are skipped)\n")
        status = conformance()
    else:
        with tqdm(total=len(GEMMS) + 2, desc="GEMMs", unit="gemm", file=sys.stderr) as bar:
            dense = gemms(bar)
            scaled = block_scaled(bar)
        figure(dense, scaled)
        status = conformance()
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
