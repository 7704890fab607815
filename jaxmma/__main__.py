"""``python -m jaxmma``: low-precision training as the GPU computes it, in about a minute.

1. Training: one small MLP (32-64-4, a synthetic 4-class task drawn with NumPy) trained
   from the same initialization on the same batches in float32 and with
   ``jaxmma.recipes``: bf16, fp8 with per-tensor current scaling (e4m3 forward, e5m2
   gradients, H100's ``mma.sync``) and NVFP4 (e2m1 with ue4m3 block scales, stochastic
   gradient rounding and the random Hadamard transform, B200's ``tcgen05.mma``). Every
   GEMM of every step, forward and backward, is the emulated instruction's bits. A table
   of the final loss and accuracy of each run and its largest distance to the float32 run.
2. A figure: the training curves and their difference to the float32 run,
   ``out/demo.png`` (the path is printed; needs matplotlib, the ``demo`` extra).
3. Bit-exact conformance on a sample of the hardware golden vectors (``tests/golden``),
   one form per family; the full sweep is ``python -m jaxmma.conformance check``.

The emulated programs are large and compile slowly: the four runs compile in two threads,
and ``make demo`` keeps them in JAX's persistent compilation cache (README, "Compilation
cache"), so a second run compiles nothing.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma import recipes
from jaxmma.conformance import __main__ as conf

FEATURES, HIDDEN, CLASSES = 32, 64, 4  # the MLP FEATURES -> HIDDEN (relu) -> CLASSES
BATCH, STEPS = 128, 200
LEARNING_RATE, MOMENTUM = 0.1, 0.9
SAMPLE = 6  # golden forms checked by the demo


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def task(seed: int = 0) -> dict:
    """A synthetic classification task: Gaussian inputs labelled by a random teacher
    network (the argmax of ``tanh(x @ t1) @ t2``), drawn fresh for every batch, so each
    batch's loss, taken before the step trains on it, is a held-out loss; the same
    arrays for every recipe."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((STEPS, BATCH, FEATURES)).astype(np.float32)
    t1 = rng.standard_normal((FEATURES, 8)) / np.sqrt(FEATURES)
    t2 = rng.standard_normal((8, CLASSES))
    y = np.argmax(np.tanh(x @ t1) @ t2, axis=-1).astype(np.int32)
    w1 = rng.standard_normal((FEATURES, HIDDEN)) * np.sqrt(2.0 / FEATURES)
    w2 = rng.standard_normal((HIDDEN, CLASSES)) * np.sqrt(1.0 / HIDDEN)
    params = (w1, np.zeros(HIDDEN), w2, np.zeros(CLASSES))
    return {"params": tuple(np.asarray(p, np.float32) for p in params), "x": x, "y": y}


def runs() -> dict:
    """The runs' recipes: None is the float32 reference (plain ``jnp.dot``)."""
    return {
        "f32": None,
        "bf16": recipes.bf16(),
        "fp8": recipes.current_scaling(),
        "nvfp4": recipes.nvfp4(),
    }


def trainer(rec):
    """``train(params, x, y, key) -> (losses [STEPS], accuracies [STEPS])``: SGD with
    momentum over the batches in one ``lax.scan``, each batch's loss and accuracy taken
    by the step's own forward, before it trains on the batch; every GEMM of the MLP
    (forward, dgrad and wgrad of both layers) through ``rec``."""

    def dot(x, w, key):
        if rec is None:
            return jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST)
        return rec.matmul(x, w, rec.init(), key=key)

    def loss(p, x, y, key):
        k1, k2 = jax.random.split(key)
        h = jax.nn.relu(dot(x, p[0], k1) + p[1][None])
        z = dot(h, p[2], k2) + p[3][None]
        nll = jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, y[:, None], -1)[:, 0]
        return jnp.mean(nll), jnp.mean(jnp.argmax(z, -1) == y)

    def train(params, x, y, key):
        def step(carry, batch):
            p, v = carry
            xb, yb, i = batch
            grad = jax.value_and_grad(loss, has_aux=True)
            (value, accuracy), g = grad(p, xb, yb, jax.random.fold_in(key, i))
            v = jax.tree.map(lambda v, g: MOMENTUM * v + g, v, g)
            p = jax.tree.map(lambda p, v: p - LEARNING_RATE * v, p, v)
            return (p, v), (value, accuracy)

        zeros = jax.tree.map(jnp.zeros_like, params)
        steps = jnp.arange(x.shape[0])
        return jax.lax.scan(step, (params, zeros), (x, y, steps))[1]

    return train


def training(data: dict) -> dict:
    """Section 1: compile the four runs (two at a time), train, and print the table."""
    recs = runs()
    print(
        f"== 1. An MLP {FEATURES}-{HIDDEN}-{CLASSES} trained {STEPS} steps (batch {BATCH},"
        " SGD with momentum),\n     the same data and initialization in each run, every GEMM"
        " emulated =="
    )
    for name, rec in recs.items():
        what = "jnp.dot in float32" if rec is None else f"{rec.forward} ({rec.arch})"
        print(f"  {name:6s} {what}")
    args = (data["params"], data["x"], data["y"], jax.random.key(0))
    t0 = time.perf_counter()

    def compile_one(name, lowered):
        t = time.perf_counter()
        compiled = lowered.compile()
        print(f"  compiled {name} in {time.perf_counter() - t:.1f} s", flush=True)
        return compiled

    # XLA compiles outside the GIL: two programs at a time on two cores
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {
            name: pool.submit(compile_one, name, jax.jit(trainer(rec)).lower(*args))
            for name, rec in recs.items()
        }
        compiled = {name: f.result() for name, f in futures.items()}
    t1 = time.perf_counter()
    out = {}
    for name, fn in compiled.items():
        losses, accuracies = fn(*args)
        out[name] = {"losses": np.asarray(losses, np.float64), "acc": np.asarray(accuracies)}
    t2 = time.perf_counter()
    print(f"  compiled in {t1 - t0:.0f} s, trained in {t2 - t1:.0f} s")
    print()
    ref = out["f32"]
    tail = STEPS // 10  # "final": the mean over the last tenth of the steps
    print(
        f"  {'run':6s} {'final loss':>10s} {'accuracy':>8s}  {'max |loss - f32|':>16s}"
        f" {'final loss - f32':>16s}"
    )
    for name, r in out.items():
        final = np.mean(r["losses"][-tail:])
        print(
            f"  {name:6s} {final:10.4f} {np.mean(r['acc'][-tail:]):8.1%}"
            f"  {np.max(np.abs(r['losses'] - ref['losses'])):16.4f}"
            f" {final - np.mean(ref['losses'][-tail:]):+16.4f}"
        )
    print(
        "  loss, accuracy: on each batch before the step trains on it (fresh data, so held"
        f" out),\n  final: over the last {tail} steps; max |loss - f32|: over all {STEPS} steps"
    )
    print()
    return out


def figure(out: dict) -> str:
    """Section 2: out/demo.png (needs matplotlib, installed with the ``demo`` extra)."""
    try:
        import matplotlib
    except ImportError:
        print("== 2. Figure: skipped (matplotlib is not installed: pip install jaxmma[demo])\n")
        return ""

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = os.path.join(os.getcwd(), "out", "demo.png")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = np.arange(1, STEPS + 1)
    ref = out["f32"]["losses"]
    for i, (name, r) in enumerate(out.items()):  # one color per run in both panels
        left.plot(steps, r["losses"], f"C{i}", lw=1, label=name)
        if name != "f32":
            right.plot(steps, r["losses"] - ref, f"C{i}", lw=1, label=name)
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_ylabel("loss on the step's batch (held out)")
    left.set_title("Training curves, every GEMM emulated bit-exactly", fontsize=10)
    left.legend(fontsize=8)
    right.axhline(0.0, color="k", lw=0.5)
    right.set_xlabel("step")
    right.set_ylabel("loss - float32 run's loss")
    right.set_title("Difference to the float32 run (same batches)", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"== 2. Figure: {path}")
    print()
    return path


def conformance() -> int:
    """Section 3: a sample of the H100 golden vectors, one form per family."""
    golden = os.path.join(_root(), "tests", "golden", "sm_90")
    print("== 3. Bit-exact against the H100: a sample of the golden forms, one per family ==")
    if not os.path.isdir(golden) or not any(n.endswith(".npz") for n in os.listdir(golden)):
        print(f"  (no golden files under {golden})")
        return 0
    records, broken = conf.golden_records(golden, sample=SAMPLE)
    results = broken + conf.check_records(records, quiet=True, desc="golden sample")
    eq = sum(r.equal for r in results)
    tot = sum(r.total for r in results)
    ok = sum(r.status == "ok" for r in results)
    print(f"  {ok}/{len(results)} forms bit-exact ({eq}/{tot} output registers or bytes)")
    print("  the full sweep: python -m jaxmma.conformance check")
    return 1 if any(r.failed for r in results) else 0


def main() -> int:
    t0 = time.perf_counter()
    print(f"jaxmma {jaxmma.__version__}: NVIDIA warp-level matrix instructions, bit-exact, in JAX")
    print()
    out = training(task())
    figure(out)
    status = conformance()
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
