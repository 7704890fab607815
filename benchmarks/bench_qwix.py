"""jaxmma's policy steps beside plain jnp steps and Qwix's quantized training, on one
flax model, on the CPU; and how many outputs of one MXFP8 GEMM Qwix and jaxmma share.

The model: a flax linen MLP 256 -> 512 -> 256 -> 10 (ReLU, softmax cross-entropy),
batch 256, one ``jax.jit`` SGD step. The configurations, all in one process:

* jnp bf16: the model with bf16 operands and float32 accumulation in XLA's own dot (the
  ``dot_general`` of each ``nn.Dense`` casts its operands): the baseline;
* jnp f32: the model as written, float32;
* jaxmma: ``jaxmma.with_policy(model.apply, [Rule(r".*head", "keep"), recipe])`` for
  ``recipes.bf16()``, ``current_scaling()``, ``mxfp8()`` and
  ``nvfp4(grad_rounding="rn", hadamard=False)`` (policies draw no keys yet): every GEMM of
  the two hidden layers emulated, fprop, dgrad and wgrad;
* Qwix (``qwix.QtProvider``, quantized training): ``fp8`` (e4m3 weights and activations,
  e5m2 gradients, one scale per tensor: ``disable_channelwise_axes=True``), ``mxfp8``
  and ``nvfp4`` (its block formats, tiles of 32 and 16 along each GEMM's K, the gradients
  and both backward operands quantized too), on the same two layers.

The 10-class head stays in float32 everywhere: Qwix 0.1.8 tiles only sizes its tile
divides (dgrad of the head contracts over 10), and jaxmma's rows keep it alike.

Each step is compiled after ``jax.clear_caches()`` (``lower(...).compile()``, tracing
included) and timed as the median over ``--steps`` rounds of one step per configuration
(a shared machine slows all alike); times are printed as multiples of the jnp bf16 step.
Beside them, the first step's loss and the share of each hidden layer's weights that
the step left unchanged (a zero gradient, or an update below half an ulp).
Without Qwix installed its rows are skipped with a note.

Then one forward GEMM, x [256, 512] @ w [512, 256], on normal inputs and on wide-range
inputs (each element times ``2**u``, u uniform in [-16, 16]): Qwix's MXFP8
(``qwix.quantize(..., "mxfp8", channelwise_axes=..., tiled_axes={K: 32})`` and
``qwix.dot_general``, as its quantized training computes the forward) against jaxmma's
bit-exact MXFP8 (``recipes.mxfp8(...).matmul``, the tcgen05 ``kind::mxf8f6f4`` model) with
the scale rule Qwix uses (a power of two rounded up: ``scale_rounding="ceil"``) and with
OCP's floor (the recipe's default): how many quantized operand elements and how many
output elements differ, and how many outputs of each equal the exact product of its own
quantized operands rounded to float32.

    python benchmarks/bench_qwix.py [--steps 10] [--skip-steps] [--skip-gemm]

XLA's flags are whatever ``XLA_FLAGS`` holds; no compilation cache is used. Results go
to stdout as Markdown; record them in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import jaxmma
from jaxmma import quant, recipes
from jaxmma.policy import Rule

try:
    import qwix
except ImportError:  # the benchmark runs without it: its rows are skipped
    qwix = None

SIZES = (256, 512, 256, 10)
BATCH = 256
LR = 0.05
DN = (((1,), (0,)), ((), ()))
RECIPES = {
    "bf16": recipes.bf16,
    "fp8 current scaling": recipes.current_scaling,
    "MXFP8": recipes.mxfp8,
    "NVFP4": lambda: recipes.nvfp4(grad_rounding="rn", hadamard=False),
}


def bf16_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    del precision, preferred_element_type
    return jax.lax.dot_general(
        lhs.astype(jnp.bfloat16),
        rhs.astype(jnp.bfloat16),
        dimension_numbers,
        preferred_element_type=jnp.float32,
    )


class MLP(nn.Module):
    """256 -> 512 -> 256 -> 10, ReLU; ``dot_general`` for every layer (flax's default:
    ``jax.lax.dot_general``)."""

    dot_general: object = None

    @nn.compact
    def __call__(self, x):
        kw = {} if self.dot_general is None else {"dot_general": self.dot_general}
        for i, features in enumerate(SIZES[1:-1]):
            x = nn.relu(nn.Dense(features, name=f"dense{i}", **kw)(x))
        return nn.Dense(SIZES[-1], name="head", **kw)(x)


def qwix_rules():
    """Qwix 0.1.8's quantized-training rules for the hidden layers (``dense0``,
    ``dense1``): per-tensor fp8, and its block formats with the backward GEMMs'
    gradient and residual operands tiled along their K (``additional_qt_config``: the
    ``QtRule`` fields tile only the weight gradient's operands)."""

    def block(fmt, tile):
        return qwix.QtRule(
            module_path="dense.*",
            weight_qtype=fmt,
            act_qtype=fmt,
            tile_size=tile,
            bwd_qtype=fmt,
            additional_qt_config={
                "dlhs_tile_size": tile,
                "drhs_tile_size": tile,
                "dlhs_residual_qtype": fmt,
                "drhs_residual_qtype": fmt,
            },
        )

    fp8 = qwix.QtRule(
        module_path="dense.*",
        weight_qtype=jnp.float8_e4m3fn,
        act_qtype=jnp.float8_e4m3fn,
        bwd_qtype=jnp.float8_e5m2,
        disable_channelwise_axes=True,
    )
    return {"fp8 (per tensor)": fp8, "mxfp8": block("mxfp8", 32), "nvfp4": block("nvfp4", 16)}


def make_step(apply):
    def loss(params, x, y):
        logits = apply({"params": params}, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), value

    return step


def configurations():
    model = MLP()
    out = {
        "jnp bf16": make_step(MLP(dot_general=bf16_dot_general).apply),
        "jnp f32": make_step(model.apply),
    }
    for name, rec in RECIPES.items():
        policy = [Rule(r".*head", "keep"), rec()]
        out[f"jaxmma {name}"] = make_step(jaxmma.with_policy(model.apply, policy))
    if qwix is not None:
        for name, rule in qwix_rules().items():
            qmodel = qwix.quantize_model(model, qwix.QtProvider([rule]))
            out[f"Qwix {name}"] = make_step(qmodel.apply)
    return out


def steps(n_steps):
    key = jax.random.key(0)
    x = jax.random.normal(jax.random.fold_in(key, 100), (BATCH, SIZES[0]), jnp.float32)
    y = jax.random.randint(jax.random.fold_in(key, 101), (BATCH,), 0, SIZES[-1])
    params = MLP().init(key, x)["params"]
    configs = configurations()
    for step in configs.values():  # Python-level caches (parsed instructions) warm for all
        jax.make_jaxpr(step)(params, x, y)
    compiled, compile_s = {}, {}
    for label, step in configs.items():
        jax.clear_caches()  # each compile from a cold JAX cache: the order does not matter
        t = time.perf_counter()
        compiled[label] = jax.jit(step).lower(params, x, y).compile()
        compile_s[label] = time.perf_counter() - t
        print(f"# compiled {label}: {compile_s[label]:.1f} s", flush=True)
    outs = {label: f(params, x, y) for label, f in compiled.items()}  # warm-up
    jax.block_until_ready(outs)
    times = {label: [] for label in compiled}
    for _ in range(n_steps):
        for label, f in compiled.items():
            t = time.perf_counter()
            jax.block_until_ready(f(params, x, y))
            times[label].append(time.perf_counter() - t)
    med = {label: statistics.median(v) for label, v in times.items()}
    base_c, base_s = compile_s["jnp bf16"], med["jnp bf16"]
    print(f"\nMLP {'-'.join(map(str, SIZES))} (flax linen), batch {BATCH}, SGD, median of "
          f"{n_steps} steps; x: multiples of the jnp bf16 step\n")  # fmt: skip
    print("| step | compile | step time | loss of the first step | hidden-layer weights "
          "the step left unchanged |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for label in compiled:
        c, s = compile_s[label], med[label]
        new = outs[label][0]
        same = [
            float(np.mean(np.asarray(new[n]["kernel"]) == np.asarray(params[n]["kernel"])))
            for n in ("dense0", "dense1")
        ]
        print(
            f"| {label} | {c:.2f} s ({c / base_c:.1f}x) | {s * 1e3:.2f} ms ({s / base_s:.1f}x) "
            f"| {float(outs[label][1]):.4f} | {same[0]:.1%}, {same[1]:.1%} |"
        )
    if qwix is None:
        print("\n(Qwix is not installed: its rows are skipped; pip install qwix)")


def gemm_inputs(kind):
    kx, kw, ux, uw = jax.random.split(jax.random.key(7), 4)
    x = jax.random.normal(kx, (256, 512), jnp.float32)
    w = jax.random.normal(kw, (512, 256), jnp.float32)
    if kind == "wide-range":  # each element times 2**u, u uniform in [-16, 16]
        x = x * jnp.exp2(jax.random.uniform(ux, x.shape, minval=-16.0, maxval=16.0))
        w = w * jnp.exp2(jax.random.uniform(uw, w.shape, minval=-16.0, maxval=16.0))
    return x, w


def exact(xq, wq):
    """The product of the quantized operands (their float32 values) rounded to float32:
    each product exact in float64, each sum rounded once to float64 (``math.fsum``) and
    then to float32 (a double rounding that can differ from one rounding only in a tie)."""
    a, b = np.asarray(xq, np.float64), np.asarray(wq, np.float64).T
    out = np.empty((a.shape[0], b.shape[0]), np.float32)
    for i, row in enumerate(a):
        products = row[None, :] * b
        out[i] = [math.fsum(p) for p in products]
    return out


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def gemm_comparison():
    if qwix is None:
        print("\n(Qwix is not installed: the GEMM comparison is skipped)")
        return
    print("\nOne forward GEMM x [256, 512] @ w [512, 256], MXFP8, float32 output "
          f"({256 * 256} outputs, {256 * 512 + 512 * 256} operand elements)\n")  # fmt: skip
    print("| inputs | jaxmma scale rule | operand elements that differ | outputs that "
          "differ (bits) | largest difference / largest output | outputs equal to the exact "
          "product of their quantized operands in float32: jaxmma, Qwix |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in ("normal", "wide-range"):
        x, w = gemm_inputs(kind)
        qx = qwix.quantize(x, "mxfp8", channelwise_axes=[0], tiled_axes={1: 32})
        qw = qwix.quantize(w, "mxfp8", channelwise_axes=[1], tiled_axes={0: 32})
        y_qwix = np.asarray(qwix.dot_general(qx, qw, DN, preferred_element_type=jnp.float32))
        dq = np.asarray(qwix.dequantize(qx)), np.asarray(qwix.dequantize(qw))
        for rule in ("ceil", "floor"):
            y = np.asarray(jax.jit(recipes.mxfp8(scale_rounding=rule).matmul)(x, w))
            mx = (
                quant.dequantize(quant.quantize_mx(x, "e4m3", axis=-1, scale_rounding=rule)),
                quant.dequantize(quant.quantize_mx(w, "e4m3", axis=-2, scale_rounding=rule)),
            )
            operands = sum(int(np.sum(bits(a) != bits(b))) for a, b in zip(mx, dq, strict=True))
            differ = int(np.sum(bits(y) != bits(y_qwix)))
            rel = float(np.max(np.abs(y.astype(np.float64) - y_qwix)) / np.max(np.abs(y)))
            hits_j = int(np.sum(bits(y) == bits(exact(*mx))))
            hits_q = int(np.sum(bits(y_qwix) == bits(exact(*dq))))
            print(
                f"| {kind} | {rule} | {operands} | {differ} ({differ / y.size:.1%}) | "
                f"{rel:.2g} | {hits_j}, {hits_q} |"
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--skip-steps", action="store_true", help="only the GEMM comparison")
    ap.add_argument("--skip-gemm", action="store_true", help="only the training steps")
    args = ap.parse_args()
    version = qwix.__version__ if qwix is not None else "not installed"
    print(f"jax {jax.__version__}, qwix {version}, {platform.machine()}, {os.cpu_count()} "
          f"cores, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, {datetime.date.today()}, "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    if not args.skip_steps:
        steps(args.steps)
    if not args.skip_gemm:
        gemm_comparison()


if __name__ == "__main__":
    main()
