"""Captures of XLA:GPU's arithmetic beyond single dots: small transformer functions
(forward and SGD training steps) and probes of its elementwise functions and reductions.

Like :mod:`._xla_capture` (whose input generator, output digests and file format this
reuses), this imports only NumPy and JAX and runs on a GPU as a script:

    python jaxmma/conformance/_xla_models.py --save DIR --run NAME

writes ``DIR/xla-models-<NAME>.npz``: per case a ``meta`` entry (JSON: name, versions,
device, ``XLA_FLAGS``, the compiled HLO text, per output its dtype, shape, SHA-256 and
CRC32) and per output its bits (whole up to 4096 elements, else a 32 x 32 corner). Run it
in several fresh processes (``--run models1``, ``models2``, ...): the autotuner may pick
other fusions in each.

Cases (``cases()``): ``model-*`` are transformer pieces at ragged sizes (200 tokens, 72
features, 2 heads of 36, an MLP of 144, 100 classes) in bf16 and f32: layer norm,
pre-norm attention with softmax, MLPs with GELU and ReLU, cross-entropy, a whole block's
loss and its SGD step, one fp8 MLP. ``probe-*`` are elementwise functions on 4096
raw-bit inputs (``a * b + c`` in f32 and bf16: is it one FMA?; exp, log, tanh, logistic,
erf, GELU, rsqrt, sqrt, division; max / min on signed zeros and NaNs), and FPRev probes
(arXiv:2411.00442) of row and column sums over 1024, 1000, 72 and 200 elements: row
``r`` holds ``+2^15`` at an anchor column, ``-2^15`` at column ``r mod n`` and 1
elsewhere, so each row's sum is ``n`` minus the size of the subtree in which the anchor
and that column meet in the GPU's summation tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import zlib

import numpy as np

try:
    from . import _xla_capture as X
except ImportError:  # run as a script from this folder
    import _xla_capture as X

GENERATOR = "jaxmma-xla-models/1"
T, D, H, F, V = 200, 72, 2, 144, 100  # tokens, features, heads, MLP width, classes
LR = 2.0**-4
PROBE_N = 4096
ANCHORS = (0, 1, 2, 3)


@dataclasses.dataclass(frozen=True)
class Arg:
    fmt: str  # an element format of _xla_capture.FORMATS, or "label" (int32 < V)
    shape: tuple
    exp_lo: int = -3
    exp_hi: int = 1


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the function builder (FUNCTIONS)
    args: tuple
    dtype: str = "f32"  # the model's parameter format
    seed: int = 0

    def key(self, i: int) -> str:
        return f"{GENERATOR}|{self.name}|{i}|seed={self.seed}"


def _params(t: str) -> tuple:
    """x, ln gain and bias, wq, wk, wv, wo, ln2 gain, bias, w1, w2, head, labels."""
    w = (-5, -3)
    return (
        Arg(t, (T, D), -2, 1), Arg(t, (D,), -1, 0), Arg(t, (D,), -4, -2),
        Arg(t, (D, D), *w), Arg(t, (D, D), *w), Arg(t, (D, D), *w), Arg(t, (D, D), *w),
        Arg(t, (D,), -1, 0), Arg(t, (D,), -4, -2), Arg(t, (D, F), *w), Arg(t, (F, D), *w),
        Arg(t, (D, V), *w), Arg("label", (T,)),
    )  # fmt: skip


def cases() -> list:
    out = []
    for t in ("bf16", "f32"):
        out += [
            Case(f"model-ln-{t}", "ln", (Arg(t, (T, D), -2, 1), Arg(t, (D,), -1, 0),
                                         Arg(t, (D,), -4, -2)), t),  # fmt: skip
            Case(f"model-mlp-relu-{t}", "mlp_relu", (Arg(t, (T, D), -2, 1),
                 Arg(t, (D, F), -5, -3), Arg(t, (F, D), -5, -3)), t),  # fmt: skip
            Case(f"model-mlp-gelu-{t}", "mlp_gelu", (Arg(t, (T, D), -2, 1),
                 Arg(t, (D, F), -5, -3), Arg(t, (F, D), -5, -3)), t),  # fmt: skip
            Case(f"model-attn-{t}", "attn", _params(t)[:7], t),
            Case(f"model-xent-{t}", "xent", (Arg(t, (T, V), -2, 1), Arg("label", (T,))), t),
            Case(f"model-block-loss-{t}", "block_loss", _params(t), t),
            Case(f"model-block-step-{t}", "block_step", _params(t), t),
            Case(f"model-mlp-step-{t}", "mlp_step", (Arg(t, (T, D), -2, 1),
                 Arg(t, (D, F), -5, -3), Arg(t, (F, D), -5, -3), Arg(t, (T, D), -2, 1)), t),
        ]  # fmt: skip
    out.append(Case("model-mlp-fp8", "mlp_fp8", (Arg("f32", (T, D), -2, 1),
                    Arg("f32", (D, F), -5, -3), Arg("f32", (F, D), -5, -3)), "f32"))  # fmt: skip
    n = PROBE_N
    for fn, lo, hi in (("fma", -3, 1), ("exp", -6, 6), ("log", -40, 40), ("tanh", -6, 3),
                       ("logistic", -6, 4), ("erf", -6, 2), ("gelu", -6, 3),
                       ("gelu_erf", -6, 3), ("rsqrt", -40, 40), ("sqrt", -40, 40),
                       ("div", -3, 3), ("relu", -3, 3)):  # fmt: skip
        nargs = 3 if fn == "fma" else 2 if fn == "div" else 1
        for t in ("f32", "bf16"):
            args = tuple(Arg(t, (n,), lo, hi) for _ in range(nargs))
            out.append(Case(f"probe-{fn}-{t}", "probe_" + fn, args, t))
    out.append(Case("probe-minmax-f32", "probe_minmax", (Arg("f32", (64,)),), "f32"))
    for rows, cols, axis in ((1024, 1024, 1), (1000, 1000, 1), (T, D, 1), (T, F, 1),
                             (T, D, 0), (T, V, 1)):  # fmt: skip
        for t in ("f32", "bf16"):
            name = f"probe-sum{axis}-{rows}x{cols}-{t}"
            out.append(Case(name, f"probe_sum{axis}", (Arg(t, (rows, cols)),), t))
            if axis == 1 and t == "f32":
                out.append(Case(f"probe-max1-{rows}x{cols}-f32", "probe_max1",
                                (Arg(t, (rows, cols)),), t))  # fmt: skip
    return out


def _labels(key: str, shape) -> np.ndarray:
    n = int(np.prod(shape))
    seed = np.uint64(zlib.crc32(key.encode()))
    r = X.splitmix64((seed << np.uint64(32)) + np.arange(n, dtype=np.uint64))
    return ((r >> np.uint64(33)) % np.uint64(V)).astype(np.int32).reshape(shape)


def inputs(case: Case) -> list:
    """Raw bits (unsigned) of each float argument, int32 labels as they are."""
    return [_labels(case.key(i), a.shape) if a.fmt == "label"
            else X.random_bits(case.key(i), a.fmt, a.shape, a.exp_lo, a.exp_hi)
            for i, a in enumerate(case.args)]  # fmt: skip


def arrays(case: Case, bits) -> list:
    import jax.numpy as jnp

    return [b if a.fmt == "label" else b.view(jnp.dtype(X.DTYPE_NAMES[a.fmt]))
            for a, b in zip(case.args, bits, strict=True)]  # fmt: skip


def probe_inputs(case: Case, bits):
    """The FPRev probes of a ``probe_sum*`` / ``probe_max1`` case: one array per anchor
    (as the case's dtype), or None for other cases."""
    import jax.numpy as jnp

    if not case.kind.startswith(("probe_sum", "probe_max")):
        return None
    rows, cols = case.args[0].shape
    axis0 = case.kind == "probe_sum0"
    R, n = (cols, rows) if axis0 else (rows, cols)  # R probes of n summands
    dt = jnp.dtype(X.DTYPE_NAMES[case.args[0].fmt])
    out = []
    for a in ANCHORS:
        P = np.ones((R, n), np.float32)
        r = np.arange(R)
        j = r % n
        P[:, a] = 2.0**15
        keep = j != a
        P[r[keep], j[keep]] = -(2.0**15)
        if case.kind == "probe_max1":  # signed zeros: which one the tree keeps
            P = np.full((R, n), -0.0, np.float32)
            P[r[keep], j[keep]] = 0.0
        out.append(np.ascontiguousarray(P.T if axis0 else P).astype(dt))
    return out


def function(case: Case):
    """The JAX function of ``case`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    def ln(x, g, b):
        x32 = x.astype(jnp.float32)
        mu = jnp.mean(x32, -1, keepdims=True)
        var = jnp.mean((x32 - mu) ** 2, -1, keepdims=True)
        return ((x32 - mu) * jax.lax.rsqrt(var + 1e-5)).astype(x.dtype) * g[None] + b[None]

    def attn(x, g, b, wq, wk, wv, wo):
        h = ln(x, g, b)
        q, k, v = (jnp.einsum("td,de->te", h, w).reshape(T, H, D // H) for w in (wq, wk, wv))
        s = jnp.einsum("thd,shd->hts", q, k) * jnp.asarray(1 / np.sqrt(D // H), x.dtype)
        p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype)
        o = jnp.einsum("hts,shd->thd", p, v).reshape(T, D)
        return x + o @ wo

    def mlp(act):
        def f(x, w1, w2):
            return act(x @ w1) @ w2

        return f

    def xent(logits, labels):
        lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=-1))

    def block_loss(x, g, b, wq, wk, wv, wo, g2, b2, w1, w2, head, labels):
        y = attn(x, g, b, wq, wk, wv, wo)
        y = y + mlp(jax.nn.gelu)(ln(y, g2, b2), w1, w2)
        return xent(y @ head, labels)

    def block_step(*args):
        params, labels = args[:-1], args[-1]
        loss, grads = jax.value_and_grad(lambda p: block_loss(*p, labels))(params)
        lr = [jnp.asarray(LR, p.dtype) for p in params]
        return loss, [p - r * gr for p, r, gr in zip(params, lr, grads, strict=True)]

    def mlp_step(x, w1, w2, t):
        def loss(w):
            y = mlp(jax.nn.relu)(x, *w)
            d = y.astype(jnp.float32) - t.astype(jnp.float32)
            return jnp.sum(d * d) * 0.5

        val, (g1, g2) = jax.value_and_grad(loss)((w1, w2))
        lr = jnp.asarray(LR, w1.dtype)
        return val, w1 - lr * g1, w2 - lr * g2

    def mlp_fp8(x, w1, w2):
        e4 = jnp.float8_e4m3fn
        h = jnp.dot(x.astype(e4), w1.astype(e4), preferred_element_type=jnp.float32)
        h = jax.nn.relu(h).astype(jnp.bfloat16)
        return jnp.dot(h, w2.astype(jnp.bfloat16), preferred_element_type=jnp.float32)

    probes = {
        "probe_fma": lambda a, b, c: a * b + c,
        "probe_exp": jnp.exp,
        "probe_log": lambda x: jnp.log(jnp.abs(x)),
        "probe_tanh": jnp.tanh,
        "probe_logistic": jax.nn.sigmoid,
        "probe_erf": jax.lax.erf,
        "probe_gelu": jax.nn.gelu,
        "probe_gelu_erf": lambda x: jax.nn.gelu(x, approximate=False),
        "probe_rsqrt": lambda x: jax.lax.rsqrt(jnp.abs(x)),
        "probe_sqrt": lambda x: jnp.sqrt(jnp.abs(x)),
        "probe_div": lambda a, b: a / b,
        "probe_relu": jax.nn.relu,
        "probe_sum1": lambda x: jnp.sum(x, axis=1),
        "probe_sum0": lambda x: jnp.sum(x, axis=0),
        "probe_max1": lambda x: jnp.max(x, axis=1),
    }

    def minmax(x):
        z = jnp.asarray([0.0, -0.0, np.nan, -np.nan, 1.0, -1.0, np.inf, -np.inf], x.dtype)
        a, b = jnp.repeat(z, 8)[: x.shape[0]], jnp.tile(z, 8)[: x.shape[0]]
        a = a + x * 0  # keep the operands run-time values
        return jnp.maximum(a, b), jnp.minimum(a, b), jax.nn.relu(a)

    fns = {"ln": ln, "attn": attn, "mlp_relu": mlp(jax.nn.relu), "mlp_gelu": mlp(jax.nn.gelu),
           "xent": xent, "block_loss": block_loss, "block_step": block_step,
           "mlp_step": mlp_step, "mlp_fp8": mlp_fp8, "probe_minmax": minmax, **probes}  # fmt: skip
    return fns[case.kind]


def capture(case: Case, run: str) -> tuple:
    import jax

    bits = inputs(case)
    args = [jax.device_put(x) for x in arrays(case, bits)]
    t0 = time.time()
    compiled = jax.jit(function(case)).lower(*args).compile()
    t1 = time.time()
    outs = jax.tree.leaves(compiled(*args))
    meta = {
        "name": case.name,
        "case": dataclasses.asdict(case),
        "generator": GENERATOR,
        "run": run,
        "inputs_crc32": X.inputs_crc32(bits),
        "hlo": compiled.as_text(),
        "compile_s": round(t1 - t0, 3),
        "outputs": [],
    }
    arrays_out = {}
    for i, o in enumerate(outs):
        ob = X.output_bits(o)
        s = X.summary(ob)
        meta["outputs"].append(s)
        arrays_out[f"out{i}"] = ob if s["whole"] else X.corner(ob)
    probes = probe_inputs(case, bits)
    if probes is not None:
        res = [np.asarray(compiled(jax.device_put(p)), np.float32) for p in probes]
        meta["probe_anchors"] = list(ANCHORS)
        arrays_out["probe"] = np.stack(res)
    return meta, arrays_out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--save", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--only", default=None, help="comma-separated parts of case names")
    a = p.parse_args(argv)
    import jax
    import jaxlib

    dev = jax.devices()[0]
    common = {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "device": getattr(dev, "device_kind", str(dev)),
        "platform": dev.platform,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    entries = {}
    run = f"models-{a.run}"
    for i, case in enumerate(cases()):
        if a.only and not any(part in case.name for part in a.only.split(",")):
            continue
        try:
            meta, outs = capture(case, a.run)
        except Exception as e:  # record what failed and go on
            print(f"{case.name}: FAILED {type(e).__name__}: {e}", flush=True)
            meta = {"name": case.name, "error": f"{type(e).__name__}: {e}", **common}
            entries[f"{i:04d}.meta"] = np.array(json.dumps(meta))
            continue
        meta.update(common)
        print(f"{case.name}: compiled in {meta['compile_s']} s", flush=True)
        entries[f"{i:04d}.meta"] = np.array(json.dumps(meta, sort_keys=True))
        for n, arr in outs.items():
            entries[f"{i:04d}.{n}"] = arr
    X._write(a.save, run, entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
