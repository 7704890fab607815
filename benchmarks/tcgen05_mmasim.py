"""Golden vectors for ``tcgen05.mma`` from MMA-Sim's Blackwell models.

MMA-Sim (Xie et al., arXiv:2511.10909; PyPI ``mmasim`` 2.1.1) models ``tcgen05.mma`` in
``mmasim.nv_ptx.sim.TCGen05MMA`` and ``TCGen05MMABlockScale``; its authors checked the
models against a B200. This script feeds them random raw bits and stores inputs and
outputs under ``tests/golden/sm_100/`` so that ``tests/test_tcgen05.py`` checks jaxmma
against them, bit for bit, without torch. It needs torch and mmasim (not jaxmma), e.g. in
a virtual environment of its own::

    python -m venv mmasim-venv && mmasim-venv/bin/pip install mmasim torch numpy
    mmasim-venv/bin/python benchmarks/tcgen05_mmasim.py

One instruction call per form, M = 128, N = 80 (10,240 elements of D). Rows of A (and C)
and columns of B come in four bands of inputs: moderate values, raw bits of any value
(NaN, Inf, subnormals, any exponent), values near underflow, and pairs that cancel (the
second half of a cancel row of A repeats the first, the second half of a cancel column
of B negates it, so their products cancel exactly and the truncation of C shows); a few
rows of A are zero. Block scales: moderate, any byte (with NaN and zero scales forced in),
small, and 1.0 in the same bands. GEMMs (``tcgen05-gemm.npz``): seven forms chained over
4 or 8 k-steps, each step MMA-Sim's instruction with the previous D as C.

Operand conventions (as jaxmma's): ``kind::f8f6f4``/``mxf8f6f4`` elements sit in a byte,
fp6 in bits 5:0 and fp4 in bits 5:2; ``mxf4*`` elements are stored one e2m1 nibble per
byte (MMA-Sim takes two per byte, the first in the high nibble: packed here).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import torch
from mmasim.nv_ptx.sim import TCGen05MMA, TCGen05MMABlockScale

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "golden" / "sm_100"
M, N = 128, 80
F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
# (sign bit, exponent bits, mantissa bits) of each element format, and the bit the
# element starts at in its operand encoding
FORMATS = {
    "f16": (5, 10),
    "bf16": (8, 7),
    "tf32": (8, 23),  # the f32 register (its low 13 bits are ignored by the instruction)
    "f32": (8, 23),
    "e4m3": (4, 3),
    "e5m2": (5, 2),
    "e3m2": (3, 2),
    "e2m3": (2, 3),
    "e2m1": (2, 1),
}
TORCH = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "tf32": torch.float32,
    "f32": torch.float32,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
SIGNED_VIEW = {8: np.int8, 16: np.int16, 32: np.int32}


def _bands(n: int) -> np.ndarray:
    """The input band (0 moderate, 1 any bits, 2 near underflow, 3 cancel) of each index."""
    return np.arange(n) * 4 // n


def random_elements(rng, fmt: str, shape, band: np.ndarray, axis: int) -> np.ndarray:
    """Raw bits (sign, exponent, mantissa; no container) of ``fmt``; ``band`` per index
    along ``axis``."""
    e, m = FORMATS[fmt]
    nbits = 1 + e + m
    bias = (1 << (e - 1)) - 1
    sign = rng.integers(0, 2, shape, dtype=np.uint64)
    man = rng.integers(0, 1 << m, shape, dtype=np.uint64)
    # moderate: exponents within +-3 of the bias (+-20 for 8-bit exponents)
    spread = min(3 if e < 8 else 20, bias)
    moderate = rng.integers(bias - spread, bias + spread + 1, shape, dtype=np.uint64)
    tiny = rng.integers(0, min(3, 1 << e), shape, dtype=np.uint64)  # subnormal, smallest
    anybits = rng.integers(0, 1 << nbits, shape, dtype=np.uint64)
    exp = moderate
    b = np.expand_dims(band, tuple(i for i in range(len(shape)) if i != axis % len(shape)))
    exp = np.where(b == 2, tiny, exp)
    bits = (sign << np.uint64(e + m)) | (exp << np.uint64(m)) | man
    bits = np.where(b == 1, anybits, bits)
    return bits.astype(np.uint32)


def operand(rng, fmt: str, rows: int, cols: int, which: str) -> np.ndarray:
    """A [rows, K] (bands on rows) or B [K, cols] (bands on columns) raw element bits."""
    if which == "a":
        x = random_elements(rng, fmt, (rows, cols), _bands(rows), 0)
        cancel = _bands(rows) == 3
        half = cols // 2
        x[cancel, half:] = x[cancel, :half]
        x[[5, 40, 70, 100]] = 0  # zero rows: every product is zero
        return x
    x = random_elements(rng, fmt, (rows, cols), _bands(cols), 1)
    cancel = _bands(cols) == 3
    half = rows // 2
    e, m = FORMATS[fmt]
    x[half:, cancel] = x[:half, cancel] ^ np.uint32(1 << (e + m))
    return x


def accumulator(rng, fmt: str) -> np.ndarray:
    """C [M, N] raw bits, banded by row as A."""
    e, m = FORMATS[fmt]
    bias = (1 << (e - 1)) - 1
    band = _bands(M)[:, None]
    sign = rng.integers(0, 2, (M, N), dtype=np.uint64)
    man = rng.integers(0, 1 << m, (M, N), dtype=np.uint64)
    moderate = rng.integers(bias - 6, bias + 7, (M, N), dtype=np.uint64)
    tiny = rng.integers(0, bias - 100 if e == 8 else 3, (M, N), dtype=np.uint64)
    exp = np.where(band == 2, tiny, moderate)
    bits = (sign << np.uint64(e + m)) | (exp << np.uint64(m)) | man
    bits = np.where(band == 1, rng.integers(0, 1 << (1 + e + m), (M, N), dtype=np.uint64), bits)
    bits[rng.random((M, N)) < 0.05] = 0  # some zero accumulators
    return bits.astype(np.uint32)


def scales(rng, stype: str, shape, band: np.ndarray, axis: int) -> np.ndarray:
    """Raw scale bytes: moderate, any byte (NaN and zero forced in), small, 1.0."""
    b = np.expand_dims(band, 1 - axis)
    if stype == "ue8m0":
        moderate = rng.integers(127 - 6, 127 + 7, shape)
        small = rng.integers(0, 20, shape)
        one, nan, zero = 127, 0xFF, 0x00  # ue8m0 has no zero: 0x00 is 2**-127
    else:  # ue4m3 (the sign bit is ignored: any byte)
        moderate = rng.integers(0x30, 0x48, shape)
        small = rng.integers(0, 8, shape)
        one, nan, zero = 0x38, 0x7F, 0x00
    anyb = rng.integers(0, 256, shape)
    flat = anyb.reshape(-1)
    flat[::7] = nan
    flat[3::11] = zero
    s = np.where(b == 0, moderate, np.where(b == 1, anyb, np.where(b == 2, small, one)))
    return s.astype(np.uint8)


# ------------------------------------------------------------------------------ torch io
def to_torch(bits: np.ndarray, fmt: str, container: str | None) -> torch.Tensor:
    """Raw element bits -> the tensor MMA-Sim takes for this operand."""
    if container == "f8f6f4" and fmt in ("e3m2", "e2m3", "e2m1"):
        shift = 2 if fmt == "e2m1" else 0  # fp4 in bits 5:2, fp6 in bits 5:0
        return torch.from_numpy((bits << shift).astype(np.uint8))
    width = 1 + sum(FORMATS[fmt]) if fmt != "tf32" else 32
    width = 32 if fmt in ("tf32", "f32") else width
    if width == 8:
        return torch.from_numpy(bits.astype(np.uint8)).view(TORCH[fmt])
    view = SIGNED_VIEW[width]
    return torch.from_numpy(bits.astype(f"uint{width}").view(view)).view(TORCH[fmt])


def from_torch(d: torch.Tensor) -> np.ndarray:
    width = d.element_size() * 8
    return d.view(torch.int16 if width == 16 else torch.int32).numpy().view(f"uint{width}")


def pack_fp4(nibbles: np.ndarray, axis: int) -> torch.Tensor:
    """e2m1 nibbles -> bytes of two along ``axis``, the first (even k) in the high nibble."""
    x = np.moveaxis(nibbles.astype(np.uint8), axis, -1)
    packed = (x[..., 0::2] << 4) | x[..., 1::2]
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(packed, -1, axis)))


# ------------------------------------------------------------------------------ forms
def dense_forms():
    yield "kind::tf32", "f32", "tf32", "tf32", 8
    yield "kind::f16", "f16", "f16", "f16", 16
    yield "kind::f16", "f32", "f16", "f16", 16
    yield "kind::f16", "f32", "bf16", "bf16", 16
    for d in ("f32", "f16"):
        for a in F8F6F4:
            for b in F8F6F4:
                yield "kind::f8f6f4", d, a, b, 32


def scaled_forms():
    for a in F8F6F4:
        for b in F8F6F4:
            yield "kind::mxf8f6f4", "block32", a, b, "ue8m0", 32, 1
    yield "kind::mxf4", "block32", "e2m1", "e2m1", "ue8m0", 64, 2
    yield "kind::mxf4nvf4", "block32", "e2m1", "e2m1", "ue8m0", 64, 2
    yield "kind::mxf4nvf4", "block16", "e2m1", "e2m1", "ue8m0", 64, 4
    yield "kind::mxf4nvf4", "block16", "e2m1", "e2m1", "ue4m3", 64, 4


def gemm_forms():
    """(MMA-Sim name of one k-step, steps, block-scale (scale type, scales per step))."""
    yield f"m{M}n{N}k16.kind::f16.f32.bf16.bf16", 8, None
    yield f"m{M}n{N}k16.kind::f16.f16.f16.f16", 4, None
    yield f"m{M}n{N}k8.kind::tf32.f32.tf32.tf32", 8, None
    yield f"m{M}n{N}k32.kind::f8f6f4.f32.e4m3.e2m1", 4, None
    yield f"m{M}n{N}k32.kind::mxf8f6f4.block32.f32.e4m3.e5m2.ue8m0", 4, ("ue8m0", 1)
    yield f"m{M}n{N}k64.kind::mxf4.block32.f32.e2m1.e2m1.ue8m0", 4, ("ue8m0", 2)
    yield f"m{M}n{N}k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3", 4, ("ue4m3", 4)


def gemm(rng, C, out) -> None:
    """A GEMM along K = steps * k: MMA-Sim's instruction chained, D of a step the C of
    the next, as a kernel's k-loop runs it (the GEMM layer's contract)."""
    for name, steps, scaled in gemm_forms():
        shape, kind, *rest = name.split(".")
        k = int(shape.split("k")[1])
        d = rest[1] if scaled else rest[0]
        a, b = (rest[2], rest[3]) if scaled else (rest[1], rest[2])
        A = operand(rng, a, M, k * steps, "a")
        B = operand(rng, b, k * steps, N, "b")
        sim = (TCGen05MMABlockScale if scaled else TCGen05MMA)("Blackwell", name)
        D = to_torch(C[d], d, None)
        if scaled:
            st, nblk = scaled
            SA = scales(rng, st, (M, nblk * steps), _bands(M), 0)
            SB = scales(rng, st, (nblk * steps, N), _bands(N), 1)
            out[f"gemm:{name}:SA"], out[f"gemm:{name}:SB"] = SA, SB
            sfmt = torch.float8_e8m0fnu if st == "ue8m0" else torch.float8_e4m3fn
        for s in range(steps):
            As, Bs = A[:, s * k : (s + 1) * k], B[s * k : (s + 1) * k]
            if not scaled:
                container = "f8f6f4" if kind == "kind::f8f6f4" else None
                D = sim(to_torch(As, a, container), to_torch(Bs, b, container), D)
                continue
            if kind == "kind::mxf8f6f4":
                ta, tb = to_torch(As, a, "f8f6f4"), to_torch(Bs, b, "f8f6f4")
            else:
                ta, tb = pack_fp4(As, 1), pack_fp4(Bs, 0)
            sa = torch.from_numpy(np.ascontiguousarray(SA[:, s * nblk : (s + 1) * nblk]))
            sb = torch.from_numpy(np.ascontiguousarray(SB[s * nblk : (s + 1) * nblk]))
            D = sim(ta, tb, D, sa.view(sfmt), sb.view(sfmt))
        out[f"gemm:{name}:A"], out[f"gemm:{name}:B"] = A, B
        out[f"gemm:{name}:D"] = from_torch(D)
        print("gemm", name, file=sys.stderr)


def main() -> None:
    rng = np.random.default_rng(20261124)
    C = {"f32": accumulator(rng, "f32"), "f16": accumulator(rng, "f16")}
    files: dict[str, dict[str, np.ndarray]] = {}
    for kind, d, a, b, k in dense_forms():
        name = f"m{M}n{N}k{k}.{kind}.{d}.{a}.{b}"
        A = operand(rng, a, M, k, "a")
        B = operand(rng, b, k, N, "b")
        container = "f8f6f4" if kind == "kind::f8f6f4" else None
        sim = TCGen05MMA("Blackwell", name)
        D = sim(to_torch(A, a, container), to_torch(B, b, container), to_torch(C[d], d, None))
        group = "dense" if kind != "kind::f8f6f4" else f"f8f6f4-{d}"
        out = files.setdefault(group, {"C_f32": C["f32"], "C_f16": C["f16"]})
        out[f"{name}:A"], out[f"{name}:B"], out[f"{name}:D"] = A, B, from_torch(D)
        print(name, file=sys.stderr)
    for kind, blk, a, b, st, k, nblk in scaled_forms():
        name = f"m{M}n{N}k{k}.{kind}.{blk}.f32.{a}.{b}.{st}"
        A = operand(rng, a, M, k, "a")
        B = operand(rng, b, k, N, "b")
        SA = scales(rng, st, (M, nblk), _bands(M), 0)
        SB = scales(rng, st, (nblk, N), _bands(N), 1)
        sim = TCGen05MMABlockScale("Blackwell", name)
        sfmt = torch.float8_e8m0fnu if st == "ue8m0" else torch.float8_e4m3fn
        if kind == "kind::mxf8f6f4":
            ta, tb = to_torch(A, a, "f8f6f4"), to_torch(B, b, "f8f6f4")
        else:
            ta, tb = pack_fp4(A, 1), pack_fp4(B, 0)
        D = sim(
            ta,
            tb,
            to_torch(C["f32"], "f32", None),
            torch.from_numpy(SA).view(sfmt),
            torch.from_numpy(SB).view(sfmt),
        )
        group = "mxf8f6f4" if kind == "kind::mxf8f6f4" else "mxf4"
        out = files.setdefault(group, {"C_f32": C["f32"]})
        out[f"{name}:A"], out[f"{name}:B"], out[f"{name}:D"] = A, B, from_torch(D)
        out[f"{name}:SA"], out[f"{name}:SB"] = SA, SB
        print(name, file=sys.stderr)
    gemm(rng, C, files.setdefault("gemm", {"C_f32": C["f32"], "C_f16": C["f16"]}))
    OUT.mkdir(parents=True, exist_ok=True)
    for group, arrays in files.items():
        small = {
            key: (v.astype(np.uint8) if key.endswith((":A", ":B")) and v.max() < 256 else v)
            for key, v in arrays.items()
        }
        small = {
            key: (v.astype(np.uint16) if v.dtype == np.uint32 and v.max() < 65536 else v)
            for key, v in small.items()
        }
        np.savez_compressed(OUT / f"tcgen05-{group}.npz", **small)
        print(OUT / f"tcgen05-{group}.npz", file=sys.stderr)


if __name__ == "__main__":
    main()
