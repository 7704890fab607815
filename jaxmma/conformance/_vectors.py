"""Deterministic input vectors for the hardware conformance harness (NumPy only).

``inputs(ins, seed, warps)`` regenerates exactly the same arrays forever from the
instruction text and the seed; nothing here depends on ``numpy.random``.

Random numbers
  SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
  OOPSLA 2014) used as a counter-based generator: the ``i``-th number (``i >= 0``) of the
  stream with key ``k`` is ``mix64(k + (i + 1) * 0x9E3779B97F4A7C15 mod 2**64)`` where
  ``mix64(z)``: ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
  z *= 0x94D049BB133111EB; z ^= z >> 31`` (all mod 2**64). This is exactly the output
  sequence of the reference ``splitmix64`` seeded with ``k``.
  A stream key is the first 8 bytes (little endian) of
  ``sha256("jaxmma-conformance/1\\0" + text + "\\0" + str(seed) + "\\0" + stream)``; each
  operand and purpose has its own stream name. Warp ``w`` uses the counters
  ``(w << 32) + j``, so the data of a warp depends only on (text, seed, w): a run with
  more warps extends, never changes, one with fewer.

Distributions (chosen per warp, recorded in ``Vectors.dists``)
  ``mma``/``wmma.mma``: warp ``w`` gets ``('bits', 'finite', 'special', 'probe')[w % 4]``;
  probes are numbered ``(w // 4) % len(probes)`` and named ``probe:<name>``.
  * ``bits``: uniform raw register bits (tf32 low 13 bits included; container padding of
    ``kind::f8f6f4`` stays zero; the sparse metadata is always valid).
  * ``finite``: random sign (or all positive), significand bits uniform, exponents in a
    narrow per-warp window: the product exponent ``pe`` is drawn inside the range both
    inputs and the output can hold, split between A and B, each with a window 0..3 wide;
    C sits at ``pe + log2(K)/2 +- 4``; 1 in 16 elements zero in some warps.
  * ``special``: half the elements from the format's specials (+-0, min/max subnormal,
    random subnormal, min normal, max finite, +-1, +-Inf, quiet and signalling NaNs with
    random payloads), the rest ``finite``. Integers: limits, 0, +-1.
  * ``probe``: see ``FLOAT_PROBES`` / ``INT_PROBES`` / ``B1_PROBES`` (after docs/numerics.md).
  ``wmma.load``/``wmma.store``: ``('index', 'bits')[w % 2]``; ``index`` stores the matrix
  element's linear index ``r * cols + c`` (registers: ``lane * elems + j``) replicated
  over 16-bit halves (8-bit formats: its low byte; sub-byte formats: random bits).
  ``ldmatrix``/``stmatrix``/``movmatrix``: ``bits``.

Sparse metadata and selectors
  ``e`` holds valid nibbles only: ``mma.sp`` any index pair with ``i0 != i1``;
  ``::ordered_metadata`` ``i0 < i1``; tf32 ``0b0100`` or ``0b1110``. Warp ``w`` uses
  selector ``(w // 4) % n`` with ``n`` from :func:`num_selectors`.

Memory operations
  ``ldmatrix``/``stmatrix``: a ``SMEM_BYTES`` image (random; stmatrix: filled with
  ``FILL``) and 32 distinct 16-byte-aligned row slots per warp (rows never overlap).
  ``wmma.load``/``wmma.store``: an image per warp (``FILL`` for stores, random padding for
  loads), an address from ``{0, align}`` and a stride from ``{default, s1, s1 + align}``
  (``align`` = the fragment's size in bytes rounded up to a power of two, at least 32),
  cycled by ``(w // 2) % 6``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import zlib
from typing import NamedTuple

import numpy as np

GENERATOR = "jaxmma-conformance/1"
GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_U64 = np.uint64

SMEM_BYTES = 1024  # ldmatrix / stmatrix image per warp
FILL = 0xA5  # initial byte of every image a store writes into


# ----------------------------------------------------------------------------- SplitMix64
def mix64(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 finalizer on a ``uint64`` array."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> _U64(30))) * _U64(_M1)
        z = (z ^ (z >> _U64(27))) * _U64(_M2)
        return z ^ (z >> _U64(31))


def splitmix64(key: int, counters) -> np.ndarray:
    """Numbers ``counters`` (``uint64``, 0-based) of the SplitMix64 stream seeded with ``key``."""
    c = np.asarray(counters, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix64(_U64(key % 2**64) + (c + _U64(1)) * _U64(GAMMA))


def stream_key(text: str, seed: int, stream: str) -> int:
    """The 64-bit key of one named stream (see the module docstring)."""
    msg = "\0".join((GENERATOR, text, str(int(seed)), stream)).encode()
    return int.from_bytes(hashlib.sha256(msg).digest()[:8], "little")


class _Rng:
    """Named counter-based streams for one (text, seed) over ``warps`` warps."""

    def __init__(self, text: str, seed: int, warps: int):
        self.text, self.seed, self.warps = text, seed, warps

    def u64(self, name: str, n: int) -> np.ndarray:
        w = np.arange(self.warps, dtype=np.uint64)[:, None] << _U64(32)
        return splitmix64(stream_key(self.text, self.seed, name), w + np.arange(n, dtype=np.uint64))

    def below(self, name: str, n: int, bound) -> np.ndarray:
        """Integers in ``[0, bound)`` (``bound`` <= 2**32, scalar or ``[warps, 1]``)."""
        u = self.u64(name, n) >> _U64(32)
        return ((u * np.asarray(bound, dtype=np.uint64)) >> _U64(32)).astype(np.int64)

    def unit(self, name: str, n: int) -> np.ndarray:
        return (self.u64(name, n) >> _U64(11)).astype(np.float64) * 2.0**-53

    def warp(self, name: str, bound) -> np.ndarray:
        """One integer in ``[0, bound)`` per warp, shape ``[warps, 1]``."""
        return self.below(name, 1, bound)

    def bits(self, name: str, n: int, width: int) -> np.ndarray:
        u = self.u64(name, n)
        return u if width == 64 else u & _U64((1 << width) - 1)


# ----------------------------------------------------------------------------- formats
class FloatFmt(NamedTuple):
    ebits: int
    mbits: int
    bias: int
    kind: str  # 'ieee' (Inf/NaN at max exponent), 'fn' (e4m3: NaN only), 'fin' (all finite)
    signed: bool = True

    @property
    def width(self) -> int:
        return int(self.signed) + self.ebits + self.mbits

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def top(self) -> int:  # largest biased exponent of a finite value
        return (1 << self.ebits) - (2 if self.kind == "ieee" else 1)

    @property
    def emax(self) -> int:
        return self.top - self.bias


FLOATS = {
    "f16": FloatFmt(5, 10, 15, "ieee"),
    "bf16": FloatFmt(8, 7, 127, "ieee"),
    "tf32": FloatFmt(8, 10, 127, "ieee"),  # the top 19 bits of an f32 register
    "f32": FloatFmt(8, 23, 127, "ieee"),
    "f64": FloatFmt(11, 52, 1023, "ieee"),
    "e4m3": FloatFmt(4, 3, 7, "fn"),
    "e5m2": FloatFmt(5, 2, 15, "ieee"),
    "e3m2": FloatFmt(3, 2, 3, "fin"),
    "e2m3": FloatFmt(2, 3, 1, "fin"),
    "e2m1": FloatFmt(2, 1, 1, "fin"),
    "ue8m0": FloatFmt(8, 0, 127, "fn", signed=False),
    "ue4m3": FloatFmt(4, 3, 7, "fn", signed=False),
}
INTS = {
    "s8": (8, True),
    "u8": (8, False),
    "s4": (4, True),
    "u4": (4, False),
    "s32": (32, True),
    "b1": (1, False),
}


def _encode(f: FloatFmt, sign, exp, frac) -> np.ndarray:
    """Codes from fields: unbiased ``exp`` (below ``emin``: subnormal with ``frac``)."""
    biased = np.clip(np.asarray(exp, dtype=np.int64) + f.bias, 0, f.top)
    frac = np.asarray(frac, dtype=np.uint64) & _U64((1 << f.mbits) - 1)
    if f.kind == "fn":  # all-ones exponent and fraction is NaN: step down to max finite
        nan = (biased == f.top) & (frac == (1 << f.mbits) - 1)
        frac = np.where(nan, frac & _U64(~1 & ((1 << f.mbits) - 1)), frac)
    code = (biased.astype(np.uint64) << _U64(f.mbits)) | frac
    if f.signed:
        code |= np.asarray(sign, dtype=np.uint64) << _U64(f.width - 1)
    return code


def encode_value(fmt: str, x: float) -> int:
    """The code of ``x`` in ``fmt``: exact when representable, else truncated toward zero
    (too large: max finite; +-inf/nan: those of the format when it has them)."""
    f = FLOATS[fmt]
    sign = int(math.copysign(1.0, x) < 0) if f.signed else 0
    s = sign << (f.width - 1)
    a = abs(x)
    if math.isnan(a) or math.isinf(a):
        if f.kind == "ieee":
            frac = (1 << (f.mbits - 1)) if math.isnan(a) else 0
            return s | ((f.top + 1) << f.mbits) | frac
        return s | (((1 << f.ebits) - 1) << f.mbits) | ((1 << f.mbits) - 1)  # NaN of 'fn'
    if a == 0.0:
        return s
    m, e = math.frexp(a)
    e -= 1
    if e < f.emin:
        return s | min(int(a / 2.0 ** (f.emin - f.mbits)), (1 << f.mbits) - 1)
    if e > f.emax:
        return int(_encode(f, sign, f.emax, (1 << f.mbits) - 1))
    return int(_encode(f, sign, e, int((2 * m - 1) * 2**f.mbits)))


def specials(fmt: str) -> list[int]:
    """Codes of the format's special values, both signs (NaN payloads added at random)."""
    f = FLOATS[fmt]
    allm = (1 << f.mbits) - 1
    out = [
        0,
        1 if f.mbits else 0,
        allm,
        1 << f.mbits,
        encode_value(fmt, 1.0),
        int(_encode(f, 0, f.emax, allm)),
    ]
    if f.kind == "ieee":
        inf = (f.top + 1) << f.mbits
        out += [inf, inf | (1 << (f.mbits - 1)), inf | 1]  # Inf, quiet NaN, signalling NaN
    elif f.kind == "fn":
        out.append((((1 << f.ebits) - 1) << f.mbits) | allm)
    if f.signed:
        out += [c | (1 << (f.width - 1)) for c in out]
    return sorted(set(out))


# ----------------------------------------------------------------------------- selection
def num_selectors(ins) -> int:
    """How many sparsity selectors (``f`` = 0 .. n-1) the sparse form accepts (docs/layouts.md)."""
    if not ins.sparse:
        return 1
    a = next(op for op in ins.operands if op.name == "a")
    return {
        (16, 16): 4,
        (16, 32): 2,
        (32, 8): 4,
        (32, 16): 2,
        (8, 32): 2,
        (8, 64): 1,
        (4, 64): 2,
        (4, 128): 1,
    }[(a.elem_bits, ins.k)]


def metadata_nibbles(ins) -> tuple[int, ...]:
    """The nibbles of ``e`` this generator uses (all valid for the form)."""
    if ins.atype == "tf32":
        return (0b0100, 0b1110)
    ordered = ins.sparse == "sp::ordered_metadata"
    return tuple(
        i0 | (i1 << 2) for i1 in range(4) for i0 in range(4) if (i0 < i1 if ordered else i0 != i1)
    )


def scale_ids(ins) -> list[tuple[int, int, int, int]]:
    """(byte_id_a, thread_id_a, byte_id_b, thread_id_b) combinations, cycled over warps."""
    byte = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}[ins.scale_vec]
    return [(byte[i % len(byte)], i % 2, byte[(i + 1) % len(byte)], i % 4) for i in range(4)]


def immediates(ins, warps: int) -> tuple[tuple, np.ndarray]:
    """Names and per-warp values (``int64 [warps, n]``) of the kernel immediates: the
    sparsity selector ``(w // 4) % num_selectors`` and the block-scale ids of
    :func:`scale_ids` number ``(w // 4) % 4``."""
    w = np.arange(warps)
    names, cols = [], []
    if ins.opcode == "mma" and ins.sparse:
        names.append("selector")
        cols.append(((w // 4) % num_selectors(ins))[:, None])
    if ins.opcode == "mma" and ins.stype:
        combos = np.asarray(scale_ids(ins), dtype=np.int64)
        names += ["byte_id_a", "thread_id_a", "byte_id_b", "thread_id_b"]
        cols.append(combos[(w // 4) % len(combos)])
    imms = np.concatenate(cols, axis=1) if cols else np.zeros((warps, 0))
    return tuple(names), imms.astype(np.int64)


MMA_DISTS = ("bits", "finite", "special", "probe")
FLOAT_PROBES = ("pairs", "chalve", "ties", "carry", "subnormal", "maxsq", "ulpfrac", "ezero")
INT_PROBES = ("limits", "extremes", "wrap")
B1_PROBES = ("ones", "zeros", "mixed")


def _probes(ins) -> tuple[str, ...]:
    if ins.atype == "b1":
        return B1_PROBES
    return INT_PROBES if ins.atype in INTS else FLOAT_PROBES


# ----------------------------------------------------------------------------- vectors
@dataclasses.dataclass(frozen=True, eq=False)
class Vectors:
    """Inputs of one instruction over ``warps`` warps.

    ``arrays``: input arrays by name, warp-major (``a``/``b``/``c`` ``[warps, 32, nregs]``
    ``uint32`` or ``uint64``; ``e``/``scale_a``/``scale_b``/``addrs`` ``[warps, 32]``;
    ``smem``/``mem`` ``uint8 [warps, nbytes]``; ``addr``/``stride`` ``[warps]``; movmatrix
    ``a`` ``[warps, 32]``). ``imm_names``/``imms``: per-warp immediates compiled into the
    kernel (sparsity selector, block-scale ids), ``int64 [warps, len(imm_names)]``.
    """

    text: str
    seed: int
    warps: int
    arrays: dict
    dists: tuple
    imm_names: tuple
    imms: np.ndarray

    def crc32(self) -> int:
        """CRC32 of everything generated (arrays, distribution names, immediates)."""
        crc = 0
        for name in sorted(self.arrays):
            a = np.ascontiguousarray(self.arrays[name])
            head = f"{name}:{a.dtype.str}:{a.shape}".encode()
            crc = zlib.crc32(
                a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes(), zlib.crc32(head, crc)
            )
        crc = zlib.crc32("|".join(self.dists).encode(), crc)
        crc = zlib.crc32("|".join(self.imm_names).encode(), crc)
        return zlib.crc32(np.ascontiguousarray(self.imms, dtype="<i8").tobytes(), crc)


def inputs(ins, seed: int = 0, warps: int = 128) -> Vectors:
    """Regenerate the inputs of ``ins`` (an :class:`jaxmma.Instruction`) for ``warps`` warps."""
    if warps < 1:
        raise ValueError(f"warps must be >= 1, got {warps}")
    rng = _Rng(ins.text, int(seed), warps)
    op = ins.opcode
    if op in ("mma", "wmma.mma"):
        return _mma_inputs(ins, rng)
    if op in ("ldmatrix", "stmatrix"):
        return _ldst_inputs(ins, rng)
    if op == "movmatrix":
        a = rng.bits("a", 32, 32).astype(np.uint32)
        return Vectors(
            ins.text, rng.seed, warps, {"a": a}, ("bits",) * warps, *immediates(ins, warps)
        )
    return _wmma_mem_inputs(ins, rng)


# ----------------------------------------------------------------------------- elements
def _pack(codes: np.ndarray, elem_bits: int, reg_bits: int, nregs: int) -> np.ndarray:
    """``[warps, 32 * nregs * per]`` element codes -> registers ``[warps, 32, nregs]``."""
    per = reg_bits // elem_bits
    c = codes.astype(np.uint64).reshape(codes.shape[0], 32, nregs, per)
    shifts = np.arange(per, dtype=np.uint64) * _U64(elem_bits)
    regs = np.bitwise_or.reduce(c << shifts, axis=-1)
    return regs.astype(np.uint32 if reg_bits == 32 else np.uint64)


@functools.cache
def _codes(fmt: str, values: tuple) -> np.ndarray:
    return np.asarray([encode_value(fmt, v) for v in values], dtype=np.uint64)


def _pick(rng, name, n, table, weights=None) -> np.ndarray:
    """Elements drawn from ``table`` (codes) with optional weights, ``uint64 [warps, n]``."""
    table = np.asarray(table, dtype=np.uint64)
    if weights is None:
        return table[rng.below(name, n, len(table))]
    cum = np.cumsum(np.asarray(weights, dtype=np.float64))
    idx = np.searchsorted(cum / cum[-1], rng.unit(name, n), side="right")
    return table[np.minimum(idx, len(table) - 1)]


class _Role(NamedTuple):
    name: str  # a | b | c
    fmt: str
    elem_bits: int
    reg_bits: int
    nregs: int

    @property
    def n(self) -> int:
        return 32 * self.nregs * (self.reg_bits // self.elem_bits)


def _float_finite(rng, r: _Role, base, width, positive, zeros) -> np.ndarray:
    f = FLOATS[r.fmt]
    tag = r.name + "/finite"
    exp = base - width // 2 + rng.below(tag + "/exp", r.n, width + 1)
    frac = rng.bits(tag + "/frac", r.n, 64) & _U64((1 << f.mbits) - 1)
    sign = np.where(positive, 0, rng.below(tag + "/sign", r.n, 2))
    code = _encode(f, sign, exp, frac)
    return np.where(rng.below(tag + "/zero", r.n, 16) < zeros, _U64(0), code)


def _float_params(ins, rng, roles):
    """Per-warp exponent windows for ``finite`` (see the module docstring)."""
    fa, fb = FLOATS[roles["a"].fmt], FLOATS[roles["b"].fmt]
    fc, fd = FLOATS[ins.ctype], FLOATS[ins.dtype]
    lo = max(fa.emin + fb.emin, max(fc.emin, fd.emin) - 4)
    hi = min(fa.emax + fb.emax, min(fc.emax, fd.emax) - 6)
    pe = lo + rng.warp("p/pe", hi - lo + 1)
    a_lo = np.maximum(fa.emin, pe - fb.emax)
    a_hi = np.minimum(fa.emax, pe - fb.emin)
    ea = a_lo + rng.below("p/ea", 1, np.maximum(a_hi - a_lo + 1, 1))
    grow = int(math.log2(ins.k)) // 2
    ec = np.clip(pe + grow - 4 + rng.warp("p/ec", 9), fc.emin - 2, fc.emax)
    return {
        "a": (ea, rng.warp("p/wa", 4)),
        "b": (pe - ea, rng.warp("p/wb", 4)),
        "c": (ec, rng.warp("p/wc", 5)),
        "positive": rng.warp("p/pos", 4) == 0,
        "zeros": rng.warp("p/zero", 2),
    }


def _float_probe(kind: str, ins, rng, r: _Role) -> np.ndarray:
    """One probe family for operand ``r`` (docs/numerics.md)."""
    fmt, tag = r.fmt, f"{r.name}/probe/{kind}"
    f = FLOATS[fmt]
    m = FLOATS[ins.dtype].mbits  # output precision the probes aim at
    ulp = 2.0**-m

    def pick(values, weights=None):
        return _pick(rng, tag, r.n, _codes(fmt, tuple(values)), weights)

    big = 2.0 ** min(7, FLOATS[ins.atype].emax // 2)
    role = r.name
    if kind == "pairs":  # +-U pairs among tiny fillers: block size and order
        if role == "a":
            fill = [2.0**-j for j in range(1, f.mbits + 14)]
            k = ins.k
            return pick([big, -big] + fill, [1, 1] + [max(k - 2, 1) / len(fill)] * len(fill))
        if role == "b":
            return pick([1.0])
        return pick([0.0, 2.0**-10, -(2.0**-10)])
    if kind == "chalve":  # C halved until it vanishes: F
        if role == "c":
            return pick([0.0] + [s * 2.0**-j for j in range(m + 16) for s in (1, -1)])
        return pick([1.0, -1.0, 1.5, -1.5, 1.25, 1.75, -1.875])
    if kind == "ties":  # exact ties for output rounding
        if role == "a":
            return pick([0.0, 1.0, ulp / 2, ulp / 4, 3 * ulp / 4, -ulp / 2, 3 * ulp / 2])
        if role == "b":
            return pick([1.0])
        return pick([0.0, 1.0, 1.0 + ulp, ulp / 2, -ulp / 2, 2.0])
    if kind == "carry":  # {1, 1.5, 1.75, 1.875}, C = 1.875 -> 8
        vals = [1.0, 1.5, 1.75, 1.875]
        return pick([1.875, 1.0, 0.0] if role == "c" else vals)
    if kind == "subnormal":  # subnormal inputs used exactly
        if role == "b":
            return pick([2.0**j for j in range(5)])
        sub = FLOATS[fmt]
        return _encode(
            sub, rng.below(tag + "/s", r.n, 2), sub.emin - 1, rng.bits(tag + "/f", r.n, 64)
        ) * (rng.below(tag + "/z", r.n, 8) > 0)
    if kind == "maxsq":  # max^2 - max^2, overflow
        mx = float(2.0**f.emax * (2 - 2.0**-f.mbits))
        if role == "c":
            return pick([0.0, mx, -mx, 1.0])
        return pick([mx, -mx, 1.0, -1.0] if role == "b" else [mx, -mx])
    if kind == "ulpfrac":  # +-{0.25, 0.5, 0.75, 1.5} ulp: alignment rounding
        if role == "b":
            return pick([1.0])
        fr = [s * q * ulp for q in (0.25, 0.5, 0.75, 1.5) for s in (1, -1)]
        return pick([0.0, 1.0, -1.0] if role == "c" else [1.0, -1.0] + fr)
    if kind == "ezero":  # shrinking products next to zero terms: e_zero
        if role == "c":
            return pick([0.0, 0.0, 2.0**-20, -(2.0**-30)])
        ex = [2.0**-j for j in range(0, -f.emin + f.mbits + 2, 2)]
        return pick([0.0] + ex, [len(ex)] + [1] * len(ex))
    raise AssertionError(kind)


def _int_elems(mode: str, ins, rng, r: _Role, probe: str | None) -> np.ndarray:
    bits, signed = INTS[r.fmt]
    tag = f"{r.name}/{mode}"
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    mask = (1 << bits) - 1

    def codes(values):
        return [v & mask for v in values]

    if mode == "bits":
        return rng.bits(tag, r.n, bits)
    if r.name != "c":
        if mode == "finite":
            return rng.bits(tag, r.n, bits)
        if mode == "special" or probe == "extremes":
            return _pick(rng, tag, r.n, codes([lo, hi, 0, 1, -1 if signed else 2]))
        if probe == "limits":
            return _pick(rng, tag, r.n, codes([lo, hi]))
        return _pick(rng, tag, r.n, codes([hi, hi - 1, lo if signed else hi]))  # wrap
    # C (s32): around the range of the sums, or at the limits
    prod = INTS[ins.atype][0] + INTS[ins.btype][0] + int(math.log2(ins.k)) + 1
    if mode == "finite":
        scale = rng.warp(tag + "/scale", min(prod + 2, 31)) + 1
        v = rng.below(tag + "/v", r.n, 1 << 32).astype(np.int64) % (np.int64(1) << scale)
        return (v - (np.int64(1) << (scale - 1))).astype(np.uint64) & _U64(mask)
    small = rng.below(tag + "/r", r.n, 1 << 16).astype(np.int64)
    i32max, i32min = 2**31 - 1, -(2**31)
    if mode == "special":
        return _pick(rng, tag, r.n, codes([i32min, i32max, 0, -1, 1]))
    near = np.where(rng.below(tag + "/side", r.n, 2) == 1, i32max - small, i32min + small)
    if probe == "extremes":
        return rng.bits(tag, r.n, 32)
    return near.astype(np.uint64) & _U64(mask)


def _b1_elems(mode: str, ins, rng, r: _Role, probe: str | None) -> np.ndarray:
    """b1 A/B as whole 32-bit words; C as s32."""
    tag = f"{r.name}/{mode}"
    full = _U64(0xFFFFFFFF)
    if r.name == "c":
        if mode in ("bits", "finite"):
            return rng.bits(tag, r.n, 32 if mode == "bits" else 9)
        return _pick(rng, tag, r.n, [0, 2**31 - 1, 2**31, 2**31 - 100, 2**32 - 1, 5])
    if mode == "bits":
        return rng.bits(tag, r.n, 32)
    if mode == "finite":  # per-warp bit density 1/8 .. 7/8
        dens = rng.warp(tag + "/d", 7) + 1
        bits = rng.below(tag + "/bits", r.n * 32, 8) < dens
        return (
            np.packbits(bits.reshape(-1, 32), axis=-1, bitorder="little")
            .view("<u4")
            .reshape(bits.shape[0], r.n)
            .astype(np.uint64)
        )
    if mode == "special":
        return _pick(rng, tag, r.n, [0, 0xFFFFFFFF, 1, 0x80000000])
    if probe == "ones":
        return np.full((rng.warps, r.n), full)
    if probe == "zeros":
        return np.zeros((rng.warps, r.n), np.uint64) if r.name == "a" else rng.bits(tag, r.n, 32)
    return _pick(rng, tag, r.n, [0, 0xFFFFFFFF])


def _place(r: _Role, codes: np.ndarray, rng, low_random) -> np.ndarray:
    """Put codes into their containers: tf32 in the top 19 bits (low 13 bits random where
    ``low_random``), ``kind::f8f6f4`` e2m1 in bits [5:2]."""
    if r.fmt == "tf32":
        low = rng.bits(r.name + "/tf32low", r.n, 13) * low_random
        return (codes << _U64(13)) | low
    if r.fmt == "e2m1" and r.elem_bits == 8:
        return codes << _U64(2)
    return codes


def _operand(ins, rng, r: _Role, dists, probe_names, params) -> np.ndarray:
    """Element codes of one of a/b/c for every warp, ``uint64 [warps, n]``."""
    mode_of = np.array([MMA_DISTS.index(d.split(":")[0]) for d in dists])[:, None]
    out = np.zeros((rng.warps, r.n), np.uint64)
    is_float = r.fmt in FLOATS
    for mi, mode in enumerate(MMA_DISTS):
        sel = mode_of == mi
        if not sel.any():
            continue
        if not is_float:  # integers, b1 (whole words) and their s32 accumulators
            gen = _b1_elems if ins.atype == "b1" else _int_elems
            probes = [d.split(":")[1] if ":" in d else None for d in dists]
            vals = np.zeros_like(out)
            for p in sorted({q for q in probes if q}) if mode == "probe" else [None]:
                pm = np.array([q == p for q in probes])[:, None]
                vals = np.where(pm, gen(mode, ins, rng, r, p), vals)
            out = np.where(sel, vals, out)
            continue
        f = FLOATS[r.fmt]
        if mode == "bits":
            if r.fmt == "tf32" or r.elem_bits == f.width:  # raw register bits
                vals = rng.bits(r.name + "/raw", r.n, r.elem_bits)
            else:  # a container: random value bits, zero padding
                vals = _place(r, rng.bits(r.name + "/bits", r.n, f.width), rng, True)
        elif mode == "finite":
            base, width = params[r.name]
            vals = _place(
                r,
                _float_finite(rng, r, base, width, params["positive"], params["zeros"]),
                rng,
                False,
            )
        elif mode == "special":
            base, width = params[r.name]
            fin = _float_finite(rng, r, base, width, False, 0)
            spec = _pick(rng, r.name + "/special", r.n, specials(r.fmt))
            if f.kind == "ieee":  # random NaN payloads
                nan = (spec >> _U64(f.mbits) & _U64((1 << f.ebits) - 1)) == (1 << f.ebits) - 1
                nan &= (spec & _U64((1 << f.mbits) - 1)) != 0
                pay = rng.bits(r.name + "/payload", r.n, f.mbits - 1)
                spec = np.where(nan & (pay != 0), spec | pay, spec)
            vals = np.where(rng.below(r.name + "/sp", r.n, 2) == 0, spec, fin)
            vals = _place(r, vals, rng, True)
        else:
            vals = np.zeros_like(out)
            for kind in probe_names:
                pm = np.array([d == f"probe:{kind}" for d in dists])[:, None]
                if pm.any():
                    vals = np.where(pm, _float_probe(kind, ins, rng, r), vals)
            vals = _place(r, vals, rng, False)
        out = np.where(sel, vals, out)
    return out


def _mma_inputs(ins, rng: _Rng) -> Vectors:
    W = rng.warps
    probe_names = _probes(ins)
    w = np.arange(W)
    dists = tuple(
        MMA_DISTS[i % 4] if i % 4 != 3 else f"probe:{probe_names[(i // 4) % len(probe_names)]}"
        for i in w
    )
    ops = {op.name: op for op in ins.operands}
    # b1 operands are generated as whole 32-bit words
    roles = {
        n: _Role(
            n,
            ops[n].fmt,
            32 if ops[n].fmt == "b1" else ops[n].elem_bits,
            ops[n].reg_bits,
            ops[n].nregs,
        )
        for n in "abc"
    }
    params = _float_params(ins, rng, roles) if ins.ctype in FLOATS else None
    arrays = {}
    for n in "abc":
        r = roles[n]
        codes = _operand(ins, rng, r, dists, probe_names, params)
        arrays[n] = _pack(codes, r.elem_bits, r.reg_bits, r.nregs)
    if ins.sparse:
        nib = np.asarray(metadata_nibbles(ins), dtype=np.uint64)
        e = nib[rng.below("e", 32 * 8, len(nib))].reshape(W, 32, 8)
        arrays["e"] = np.bitwise_or.reduce(
            e << (np.arange(8, dtype=np.uint64) * _U64(4)), axis=-1
        ).astype(np.uint32)
    if ins.stype:
        arrays["scale_a"], arrays["scale_b"] = (_scales(ins, rng, n, dists) for n in "ab")
    imm_names, imms = immediates(ins, W)
    return Vectors(ins.text, rng.seed, W, arrays, dists, imm_names, imms)


def _scales(ins, rng, which, dists) -> np.ndarray:
    """Scale registers ``[warps, 32]``: raw bytes, or exponents near 1 for finite/probe."""
    tag = f"scale_{which}"
    raw = rng.bits(tag + "/raw", 32 * 4, 8)
    if ins.stype == "ue8m0":
        near = 127 - 3 + rng.below(tag + "/near", 32 * 4, 7).astype(np.uint64)
    else:
        near = (np.uint64(7 - 2) + rng.below(tag + "/near", 32 * 4, 5).astype(np.uint64)) << _U64(
            3
        ) | rng.bits(tag + "/m", 32 * 4, 3)
    spec = _pick(rng, tag + "/spec", 32 * 4, specials(ins.stype))
    kinds = np.array([d.split(":")[0] for d in dists])[:, None]
    b = np.where(kinds == "bits", raw, np.where(kinds == "special", spec, near))
    b = b.reshape(rng.warps, 32, 4)
    return np.bitwise_or.reduce(b << (np.arange(4, dtype=np.uint64) * _U64(8)), axis=-1).astype(
        np.uint32
    )


# ----------------------------------------------------------------------------- movement
def _ldst_inputs(ins, rng: _Rng) -> Vectors:
    W = rng.warps
    slots = SMEM_BYTES // 16
    # 32 distinct row slots per warp: sort random keys (a permutation from the stream)
    keys = rng.u64("addrs", slots)
    addrs = (np.argsort(keys, axis=1, kind="stable")[:, :32] * 16).astype(np.uint32)
    arrays = {"addrs": addrs}
    if ins.opcode == "ldmatrix":
        arrays["smem"] = rng.bits("smem", SMEM_BYTES, 8).astype(np.uint8)
    else:
        arrays["smem"] = np.full((W, SMEM_BYTES), FILL, np.uint8)
        (r,) = ins.operands
        arrays["r"] = rng.bits("r", 32 * r.nregs, 32).astype(np.uint32).reshape(W, 32, r.nregs)
    return Vectors(ins.text, rng.seed, W, arrays, ("bits",) * W, *immediates(ins, W))


class WmmaGeometry(NamedTuple):
    """Where a ``wmma.load``/``wmma.store`` matrix lies in memory."""

    rows: int
    cols: int
    elem_bits: int
    lines: int  # rows (row-major) or columns (column-major)
    line_len: int  # elements per line = the default stride
    align: int  # bytes
    strides: tuple  # element strides used
    addrs: tuple  # byte addresses used
    nbytes: int  # image size per warp


def wmma_geometry(ins) -> WmmaGeometry:
    (op,) = ins.operands
    f = ins.form
    rows, cols = {"a": (f.m, f.k), "b": (f.k, f.n)}.get(f.frag, (f.m, f.n))
    eb = op.elem_bits
    lines, line_len = (rows, cols) if ins.layout == "row" else (cols, rows)
    frag = op.nregs * op.reg_bits // 8
    align = max(32, 1 << (frag - 1).bit_length())
    per_align = align * 8 // eb  # elements per alignment unit
    s1 = (line_len // per_align + 1) * per_align
    strides = (line_len, s1, s1 + per_align)
    addrs = (0, align)
    need = addrs[-1] + (lines - 1) * strides[-1] * eb // 8 + line_len * eb // 8
    return WmmaGeometry(
        rows, cols, eb, lines, line_len, align, strides, addrs, -(-need // 256) * 256
    )


def element_offsets(g: WmmaGeometry, layout: str, addr: int, stride: int) -> np.ndarray:
    """Bit offset of each matrix element ``[rows, cols]`` in the image."""
    r, c = np.meshgrid(np.arange(g.rows), np.arange(g.cols), indexing="ij")
    idx = r * stride + c if layout == "row" else c * stride + r
    return addr * 8 + idx * g.elem_bits


def _index_codes(values: np.ndarray, bits: int) -> np.ndarray:
    v = values.astype(np.uint64)
    if bits >= 32:
        v = v * _U64(0x0001000100010001 if bits == 64 else 0x00010001)
    return v & _U64((1 << bits) - 1 if bits < 64 else 2**64 - 1)


def _wmma_mem_inputs(ins, rng: _Rng) -> Vectors:
    W = rng.warps
    g = wmma_geometry(ins)
    (op,) = ins.operands
    dists = tuple(("index", "bits")[i % 2] for i in range(W))
    combos = [(a, s) for a in g.addrs for s in g.strides]
    k = (np.arange(W) // 2) % len(combos)
    addr = np.array([combos[i][0] for i in k], np.uint32)
    stride = np.array([combos[i][1] for i in k], np.uint32)
    arrays = {"addr": addr, "stride": stride}
    if ins.opcode == "wmma.store":
        arrays["mem"] = np.full((W, g.nbytes), FILL, np.uint8)
        per = op.reg_bits // op.elem_bits
        n = 32 * op.nregs * per
        lin = np.broadcast_to(np.arange(n), (W, n))
        index = (np.array(dists)[:, None] == "index") & (op.elem_bits >= 8)
        codes = np.where(index, _index_codes(lin, op.elem_bits), rng.bits("r", n, op.elem_bits))
        arrays["r"] = _pack(codes, op.elem_bits, op.reg_bits, op.nregs)
    else:
        mem = rng.bits("mem", g.nbytes, 8).astype(np.uint8)
        if g.elem_bits >= 8:
            eb = g.elem_bits // 8
            vals = _index_codes(np.arange(g.rows * g.cols), g.elem_bits)
            le = vals.astype(f"<u{eb}").view(np.uint8).reshape(-1, eb)
            for i in range(W):
                if dists[i] == "index":
                    off = element_offsets(g, ins.layout, int(addr[i]), int(stride[i])) // 8
                    pos = off.reshape(-1, 1) + np.arange(eb)
                    mem[i, pos] = le
        arrays["mem"] = mem
    return Vectors(ins.text, rng.seed, W, arrays, dists, *immediates(ins, W))
