"""Captures of XLA:GPU's own dots: jitted ``jnp.dot`` / ``lax.dot_general`` calls and one
small training step, run on a GPU, stored with their compiled HLO text.

This module imports only NumPy and JAX (it runs on the GPU machine as a script, with the
JAX release installed there). Each :class:`Case` names a jitted function and its
arguments; the arguments' raw bits are built by :func:`inputs` from integer SplitMix64
streams keyed by the case name and a seed, so that any NumPy rebuilds the same bits
(no float arithmetic, no ``jax.random``).

Run on a GPU: ``python _xla_capture.py --save DIR --run NAME`` writes
``DIR/xla-<NAME>.npz``: per case its ``meta`` (JSON: name, versions, device, date,
``XLA_FLAGS``, the compiled HLO text, per output its dtype, shape, SHA-256 and CRC32)
and per output either every element's bits (small outputs) or a corner tile of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
import zlib

import numpy as np

GENERATOR = "jaxmma-xla/1"
#: outputs with at most this many elements are stored whole; larger ones by a corner tile
WHOLE = 1 << 12
CORNER = 32

# element formats: (container, exponent bits, mantissa bits, bias)
FORMATS = {
    "bf16": (np.uint16, 8, 7, 127),
    "f16": (np.uint16, 5, 10, 15),
    "f32": (np.uint32, 8, 23, 127),
    "e4m3": (np.uint8, 4, 3, 7),
    "e5m2": (np.uint8, 5, 2, 15),
}
DTYPE_NAMES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}
_U = np.uint64


def splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _U(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def random_bits(key: str, fmt: str, shape, exp_lo: int, exp_hi: int) -> np.ndarray:
    """Raw bits of ``fmt`` values ``+-2^e * (1 + f)``: e uniform in ``[exp_lo, exp_hi]``,
    a random sign and random fraction bits (every value normal and finite)."""
    kind, ebits, mbits, bias = FORMATS[fmt]
    n = int(np.prod(shape))
    seed = _U(zlib.crc32(key.encode()))
    r = splitmix64((seed << _U(32)) + np.arange(n, dtype=np.uint64))
    span = exp_hi - exp_lo + 1
    e = (((r >> _U(32)) & _U(0xFFFF)) * _U(span)) >> _U(16)
    e = e.astype(np.int64) + exp_lo + bias
    if e.min() < 1 or e.max() >= (1 << ebits) - 1:
        raise ValueError(f"{key}: exponents {exp_lo}..{exp_hi} leave the normal range of {fmt}")
    m = r & _U((1 << mbits) - 1)  # e4m3's NaN codes need exponent 15: never made here
    sign = (r >> _U(63)) & _U(1)
    bits = (sign << _U(ebits + mbits)) | (e.astype(np.uint64) << _U(mbits)) | m
    return bits.astype(kind).reshape(shape)


@dataclasses.dataclass(frozen=True)
class Arg:
    fmt: str
    shape: tuple
    exp_lo: int = -3
    exp_hi: int = 1


@dataclasses.dataclass(frozen=True)
class Case:
    """One jitted function: ``kind`` ``"dot"`` (``lax.dot_general`` of two args with
    ``dims`` and ``out``: preferred element type or None) or ``"train"`` (one SGD step of
    a two-layer ReLU network, ``fmt`` its parameters' type)."""

    name: str
    kind: str
    args: tuple
    dims: tuple = ()
    out: str | None = None
    seed: int = 0

    def key(self, i: int) -> str:
        return f"{GENERATOR}|{self.name}|{i}|seed={self.seed}"


def _dot(name, fa, fb, M, K, N, out=None, batch=None, rhs_t=False, lhs_t=False):
    a = (K, M) if lhs_t else (M, K)
    a = a if batch is None else (batch,) + a
    b = (N, K) if rhs_t else (K, N)
    if batch is not None:
        b = (batch,) + b
    lc = (len(a) - 2,) if lhs_t else (len(a) - 1,)
    rc = (len(b) - 1,) if rhs_t else (len(b) - 2,)
    bd = ((0,), (0,)) if batch is not None else ((), ())
    return Case(name, "dot", (Arg(fa, a), Arg(fb, b)), ((lc, rc), bd), out)


def cases() -> list:
    out = []
    shapes = {"s32": (64, 4096, 64), "s64": (128, 8192, 64), "s4": (256, 1024, 512),
              "nosplit": (128, 256, 128), "odd": (96, 640, 80)}  # fmt: skip
    for t in ("bf16", "f16"):
        for s in ("s32", "s4", "nosplit", "odd"):
            out.append(_dot(f"{t}-{s}", t, t, *shapes[s]))
        out.append(_dot(f"{t}-s64", t, t, *shapes["s64"]))
        out.append(_dot(f"{t}-f32out-s32", t, t, *shapes["s32"], out="f32"))
        out.append(_dot(f"{t}-f32out-s4", t, t, *shapes["s4"], out="f32"))
    for s in ("s32", "s4", "nosplit", "s64"):
        out.append(_dot(f"f32-{s}", "f32", "f32", *shapes[s]))
    for fa, fb in (("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e5m2")):
        for o in ("f32", "bf16"):
            for s in ("s32", "nosplit"):
                out.append(_dot(f"{fa}x{fb}-{o}-{s}", fa, fb, *shapes[s], out=o))
    out.append(_dot("bf16-batch", "bf16", "bf16", 64, 2048, 64, batch=4))
    out.append(_dot("f16-rhsT-f32out", "f16", "f16", 64, 4096, 64, out="f32", rhs_t=True))
    out.append(_dot("f32-rhsT", "f32", "f32", 128, 1024, 96, rhs_t=True))
    for t in ("bf16", "f16", "f32"):
        out.append(_dot(f"{t}-f32out-s64", t, t, *shapes["s64"], out="f32"))
        out.append(_dot(f"{t}-wgrad1", t, t, 128, 2048, 256, lhs_t=True))
        out.append(_dot(f"{t}-wgrad2", t, t, 256, 2048, 64, lhs_t=True))
    # XLA's native reduction emitter over S = 128 partials (an H100 split these 128 x 128
    # dots into 128 slices; K = 131072 in f32 too)
    for t, K in (("bf16", 32768), ("f32", 32768), ("f32", 65536), ("f32", 131072)):
        out.append(_dot(f"{t}-128x{K}x128", t, t, 128, K, 128, out="f32" if t == "bf16" else None))
    for t in ("bf16", "f32"):
        tok, d, h, o = 2048, 128, 256, 64
        args = (Arg(t, (tok, d)), Arg(t, (d, h), -6, -3), Arg(t, (h, o), -6, -3),
                Arg(t, (tok, o)))  # fmt: skip
        out.append(Case(f"train-{t}", "train", args, out=t))
    return out


def inputs(case: Case) -> list:
    """The raw bits of each argument of ``case`` (NumPy unsigned arrays)."""
    return [random_bits(case.key(i), a.fmt, a.shape, a.exp_lo, a.exp_hi)
            for i, a in enumerate(case.args)]  # fmt: skip


def inputs_crc32(arrays) -> int:
    crc = 0
    for a in arrays:
        a = np.ascontiguousarray(a)
        crc = zlib.crc32(f"{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(a.tobytes(), crc)
    return crc


#: learning rate of the training step (a power of two)
LR = 2.0**-4


def function(case: Case):
    """The JAX function of ``case`` (not jitted)."""
    import jax
    import jax.numpy as jnp

    if case.kind == "dot":
        pet = None if case.out is None else jnp.dtype(DTYPE_NAMES[case.out])

        def f(a, b):
            return jax.lax.dot_general(a, b, case.dims, preferred_element_type=pet)

        return f

    def loss(w1, w2, x, t):
        h = jax.nn.relu(jnp.dot(x, w1))
        y = jnp.dot(h, w2)
        d = y.astype(jnp.float32) - t.astype(jnp.float32)
        return 0.5 * jnp.sum(d * d), y

    def step(x, w1, w2, t):
        (_, y), (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(w1, w2, x, t)
        lr = jnp.asarray(LR, w1.dtype)
        return y, g1, g2, w1 - lr * g1, w2 - lr * g2

    return step


def arrays(case: Case, bits):
    """``bits`` viewed as the case's JAX dtypes (NumPy arrays with ml_dtypes types)."""
    import jax.numpy as jnp

    return [b.view(jnp.dtype(DTYPE_NAMES[a.fmt])) for a, b in zip(case.args, bits, strict=True)]


def output_bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


def summary(bits: np.ndarray) -> dict:
    b = np.ascontiguousarray(bits)
    return {
        "dtype": str(np.asarray(bits).dtype),
        "shape": list(b.shape),
        "sha256": hashlib.sha256(b.tobytes()).hexdigest(),
        "crc32": zlib.crc32(b.tobytes()),
        "whole": b.size <= WHOLE,
    }


def corner(bits: np.ndarray) -> np.ndarray:
    idx = tuple(0 if i < bits.ndim - 2 else slice(0, CORNER) for i in range(bits.ndim))
    return np.ascontiguousarray(bits[idx])


PROBE_EXP = 15


def split_count(hlo: str) -> int:
    """S of the first split-K reduce in a compiled module: the size of the reduced
    dimension of a ``reduce`` over f32 partials (1 if none)."""
    import re

    shapes = dict(re.findall(r"%(\S+) = f32\[([\d,]+)\]", hlo))
    for op, dim in re.findall(r"reduce\(%(\S+), %\S+\), dimensions=\{(\d+)\}", hlo):
        if op in shapes:
            return int(shapes[op].split(",")[int(dim)])
    return 1


def probe_inputs(case: Case, S: int):
    """Operands whose partials reveal the reduce tree (FPRev, arXiv:2411.00442): for
    output element (i, j), i != j < S, slice i's partial is +2^30 (+1 absorbed), slice
    j's -2^30, every other slice's 1; the result is S minus the number of slices under
    the tree node where i and j meet. None when the case has no such probe."""
    import jax.numpy as jnp

    if case.kind != "dot" or S < 2 or any(a.fmt not in ("bf16", "f16", "f32") for a in case.args):
        return None
    (lc, rc), (lb, _) = case.dims
    a_shape, b_shape = case.args[0].shape, case.args[1].shape
    K = a_shape[lc[0]]
    M = a_shape[-2] if lc[0] == len(a_shape) - 1 else a_shape[-1]
    N = b_shape[-1] if rc[0] == len(b_shape) - 2 else b_shape[-2]
    if K % S or M < S or N < S or K // S < 3:
        return None
    L = K // S
    big = 2.0**PROBE_EXP
    A = np.zeros((M, K), np.float32)
    B = np.zeros((K, N), np.float32)
    s = np.arange(S)
    A[:, s * L] = 1
    B[s * L, :] = 1
    A[s, s * L + 1] = big
    B[s * L + 1, :] = big
    A[:, s * L + 2] = big
    B[s * L + 2, s] = -big
    if lc[0] != len(a_shape) - 1:
        A = A.T
    if rc[0] != len(b_shape) - 2:
        B = B.T
    if lb:
        A = np.broadcast_to(A, a_shape)
        B = np.broadcast_to(B, b_shape)
    dts = [jnp.dtype(DTYPE_NAMES[a.fmt]) for a in case.args]
    return [np.ascontiguousarray(A).astype(dts[0]), np.ascontiguousarray(B).astype(dts[1])]


def capture(case: Case, run: str) -> tuple:
    import jax

    bits = inputs(case)
    args = [jax.device_put(x) for x in arrays(case, bits)]
    t0 = time.time()
    compiled = jax.jit(function(case)).lower(*args).compile()
    t1 = time.time()
    outs = compiled(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    meta = {
        "name": case.name,
        "case": dataclasses.asdict(case),
        "generator": GENERATOR,
        "run": run,
        "inputs_crc32": inputs_crc32(bits),
        "hlo": compiled.as_text(),
        "compile_s": round(t1 - t0, 3),
        "outputs": [],
    }
    arrays_out = {}
    for i, o in enumerate(outs):
        ob = output_bits(o)
        s = summary(ob)
        meta["outputs"].append(s)
        arrays_out[f"out{i}"] = ob if s["whole"] else corner(ob)
    S = split_count(meta["hlo"])
    probe = probe_inputs(case, S)
    if probe is not None:
        r = np.asarray(compiled(*[jax.device_put(x) for x in probe]))
        r = r[0] if r.ndim == 3 else r
        meta["probe_split"] = S
        arrays_out["probe"] = np.ascontiguousarray(r[:S, :S].astype(np.float32))
    return meta, arrays_out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--save", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--only", default=None, help="comma-separated parts of case names")
    p.add_argument("--probes-only", action="store_true", help="keep the HLO and probes")
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
    for i, case in enumerate(cases()):
        if a.only and not any(part in case.name for part in a.only.split(",")):
            continue
        try:
            meta, outs = capture(case, a.run)
        except Exception as e:  # record what failed and go on
            print(f"{case.name}: FAILED {type(e).__name__}: {e}", flush=True)
            entries[f"{i:04d}.meta"] = np.array(
                json.dumps({"name": case.name, "error": f"{type(e).__name__}: {e}", **common})
            )
            continue
        meta.update(common)
        print(f"{case.name}: compiled in {meta['compile_s']} s", flush=True)
        entries[f"{i:04d}.meta"] = np.array(json.dumps(meta, sort_keys=True))
        for n, arr in outs.items():
            if not a.probes_only or n == "probe":
                entries[f"{i:04d}.{n}"] = arr
        _write(a.save, a.run, entries)  # after every case: a cut run keeps what it has
    _write(a.save, a.run, entries)
    return 0


def capture_args(argv, description: str):
    """``--save DIR --run NAME``, the arguments of every capture script."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--save", required=True)
    ap.add_argument("--run", required=True)
    return ap.parse_args(argv)


def process_meta(run: str) -> dict:
    """What every capture records of the process that ran it: the run's name, jax's
    version, the device and ``XLA_FLAGS``."""
    import jax

    return {
        "run": run,
        "jax": jax.__version__,
        "device": str(jax.devices()[0].device_kind),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def write_npz(directory: str, name: str, entries: dict) -> None:
    """``DIR/NAME.npz``, compressed, written whole or not at all."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.tmp.npz")
    np.savez_compressed(tmp, **entries)
    os.replace(tmp, os.path.join(directory, f"{name}.npz"))


def _write(directory: str, run: str, entries: dict) -> None:
    write_npz(directory, f"xla-{run}", entries)


if __name__ == "__main__":
    sys.exit(main())
