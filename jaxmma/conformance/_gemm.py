"""Chained GEMM captures: whole ``A @ B + C`` products run as a chain of ``mma.sync`` on a GPU.

A GEMM ``A [M, K] @ B [K, N] + C`` is tiled onto one ``mma`` form as a CUTLASS-style kernel
computes it: every ``m x n`` output tile is one warp, it starts from its tile of C and
runs the instruction over the k-steps in increasing k, the D of one step being the C of
the next. K is zero-padded to a multiple of the instruction's k. With ``promote_every=P``
(f32 accumulators only) the instruction's accumulator starts from +0 and every P steps
(and once more for a remainder) it is added into an f32 total that started at C, with one
f32 add rounded to nearest (``__fadd_rn``: FADD, never contracted into an FMA).

The kernel does no layout work: the host cuts the matrices into per-step tiles and
gathers them into registers with the emulator's hardware-checked fragment maps
(:meth:`jaxmma.Instruction.fragment`); the kernel reads ``a``/``b`` ``[warps, steps, 32,
nregs]`` and ``c`` ``[warps, 32, nregs]`` and writes ``d`` ``[warps, 32, nregs]``, whose
registers :meth:`~jaxmma.Instruction.unfragment` turns back into the tile.

Records (one per form, ``promote_every``, steps and K): ``problems`` independent GEMMs of
``M = mt * m`` by ``N = nt * n`` (warp ``w`` = tile ``(i, j)`` of problem ``g`` with
``w = (g * mt + i) * nt + j``), each with its own distribution, cycled over
``DISTS``. Inputs are regenerated from the record's parameters (SplitMix64 streams as in
:mod:`._vectors`, integer and exactly rounded float64 arithmetic only, so that any NumPy
rebuilds the same bits); golden files keep only the hardware's ``d`` registers, the
parameters and the CRC32 of the regenerated inputs.

Distributions (A and B; C follows them at the scale of the sums):

* ``normal``: approximately normal values (a sum of 12 uniforms), truncated into the
  format; integers: ``round(32 z)`` clipped to the type.
* ``wide``: random signs, exponents uniform over a wide window (:func:`wide_exp`, clipped
  to the format), uniform significand bits; integers: uniform codes.
* ``special``: ``normal`` with 1 in 8 elements a random subnormal and about one special
  per dot product (+-0, +-Inf, NaNs with random payloads, max finite, min normal);
  integers: the type's limits, 0 and +-1, with C near the s32 limits (saturation, wrap).
* ``bits``: uniform raw bits everywhere (tf32 low 13 bits included).
* ``small``: ``normal`` scaled so that the products land in the output's subnormal range
  where the input formats reach it (:func:`small_exp`); integers: -3 .. 3.
* ``cancel``: ``normal`` A and B where the second half of K cancels the first exactly; C
  is +-0 (signed zero results, cancellation inside and across the k-steps).

The random streams are keyed by :attr:`Case.data_key`, which leaves out ``promote_every``
and ``.satfinite``: those variants of a form see the same inputs.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import zlib

import numpy as np

import jaxmma

from . import _golden, _kernels, _vectors

GENERATOR = "jaxmma-gemm/1"
FORMAT = 1
DISTS = ("normal", "wide", "special", "bits", "small", "cancel", "special", "normal")
WIDE_EXP = 24  # A/B exponents in [-WIDE_EXP, WIDE_EXP] at most (C: twice that)
_U64 = np.uint64

# (instruction text, promote_every) captured for issue #10; steps and K per record below
FORMS = (
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", None),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", None),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", None),
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", None),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", None),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 1),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 4),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32", None),
    ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", None),
    ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32", None),
)
# (steps, K short of steps * k): one step, a ragged K (zero-padded), a long chain
STEPS = ((1, 0), (7, 3), (64, 0))
PROBLEMS, MT, NT = 8, 2, 2  # 8 GEMMs of 2 x 2 tiles: 32 warps per record


# ----------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class Case:
    """The parameters of one chained GEMM record."""

    text: str
    promote_every: int | None
    steps: int
    K: int
    seed: int = 0
    problems: int = PROBLEMS
    mt: int = MT
    nt: int = NT
    arch: str = "sm_90"

    def instruction(self):
        return jaxmma.instruction(self.text, arch=self.arch)

    @property
    def warps(self) -> int:
        return self.problems * self.mt * self.nt

    @property
    def data_key(self) -> str:
        """Names the random streams: the shape and types, steps, K and problems, so that
        the ``promote_every`` and ``.satfinite`` variants of a form share their inputs."""
        ins = self.instruction()
        return (
            f"{ins.shape}.{ins.dtype}.{ins.atype}.{ins.btype}.{ins.ctype}|S={self.steps}|"
            f"K={self.K}|G={self.problems}x{self.mt}x{self.nt}"
        )

    @property
    def key(self) -> str:
        """Identifies the record in a golden file."""
        p = self.promote_every or 0
        return f"{self.text}|P={p}|S={self.steps}|K={self.K}|G={self.problems}x{self.mt}x{self.nt}"

    def dists(self) -> tuple:
        return tuple(DISTS[g % len(DISTS)] for g in range(self.problems))

    def check(self) -> None:
        ins = self.instruction()
        if ins.opcode != "mma" or ins.sparse or ins.stype or ins.shape == "m8n8k4":
            raise ValueError(f"chained GEMMs take dense mma forms, not {ins.text!r}")
        if ins.alayout != "row" or ins.blayout != "col":
            raise ValueError(f"chained GEMMs use .row.col forms, not {ins.text!r}")
        if not (1 <= self.steps and (self.steps - 1) * ins.k < self.K <= self.steps * ins.k):
            raise ValueError(f"K={self.K} does not need exactly {self.steps} steps of k={ins.k}")
        if self.promote_every is not None:
            if ins.ctype != "f32" or ins.dtype != "f32":
                raise ValueError(f"promote_every needs f32 accumulators: {ins.text!r}")
            if self.promote_every < 1:
                raise ValueError(f"promote_every must be >= 1, got {self.promote_every}")


def default_cases(seed: int = 0, arch: str = "sm_90") -> list[Case]:
    """The records of ``FORMS`` x ``STEPS``."""
    out = []
    for text, p in FORMS:
        k = jaxmma.instruction(text, arch=arch).k
        out += [Case(text, p, s, s * k - short, seed, arch=arch) for s, short in STEPS]
    return out


# ----------------------------------------------------------------------------- inputs
@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """Inputs of a case as raw element bits (``uint32``, element in the low bits; tf32 as
    its f32 register): ``A [G, M, K]``, ``B [G, K, N]``, ``C [G, M, N]``."""

    case: Case
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    dists: tuple

    def crc32(self) -> int:
        crc = zlib.crc32(self.case.data_key.encode())
        for name in ("A", "B", "C"):
            a = np.ascontiguousarray(getattr(self, name), dtype="<u4")
            crc = zlib.crc32(f"{name}:{a.shape}".encode(), crc)
            crc = zlib.crc32(a.tobytes(), crc)
        return zlib.crc32("|".join(self.dists).encode(), crc)

    def padded(self):
        """A, B zero-padded along K to ``steps * k`` (what the kernel runs)."""
        kp = self.case.steps * self.case.instruction().k
        pad = kp - self.A.shape[-1]
        A = np.pad(self.A, ((0, 0), (0, 0), (0, pad)))
        B = np.pad(self.B, ((0, 0), (0, pad), (0, 0)))
        return A, B


class _Streams:
    def __init__(self, case: Case):
        self.case = case

    def u64(self, name: str, shape) -> np.ndarray:
        key = _vectors.stream_key(self.case.data_key, self.case.seed, name)
        n = int(np.prod(shape))
        return _vectors.splitmix64(key, np.arange(n, dtype=np.uint64)).reshape(shape)

    def below(self, name: str, shape, bound: int) -> np.ndarray:
        u = self.u64(name, shape) >> _U64(32)
        return ((u * _U64(bound)) >> _U64(32)).astype(np.int64)

    def bits(self, name: str, shape, width: int) -> np.ndarray:
        return self.u64(name, shape) & _U64((1 << width) - 1)

    def normal(self, name: str, shape) -> np.ndarray:
        """Sum of 12 uniforms minus 6 (mean 0, variance 1); exact float64 steps only."""
        u = self.u64(name, (12, *shape))
        z = np.zeros(shape, np.float64)
        for i in range(12):
            z = z + (u[i] >> _U64(11)).astype(np.float64) * 2.0**-53
        return z - 6.0


def encode_floats(fmt: str, x: np.ndarray) -> np.ndarray:
    """Codes of the float64 values ``x`` in ``fmt``, truncated toward zero (too large: max
    finite), ``uint64``. Vectorised :func:`._vectors.encode_value` for finite ``x``."""
    f = _vectors.FLOATS[fmt]
    sign = np.signbit(x).astype(np.uint64)
    a = np.abs(x)
    m, e = np.frexp(a)
    e = e.astype(np.int64) - 1
    frac_n = np.floor((2 * m - 1) * 2.0**f.mbits).astype(np.int64)
    frac_s = np.minimum(np.floor(a * 2.0 ** (f.mbits - f.emin)), (1 << f.mbits) - 1).astype(
        np.int64
    )
    big = e > f.emax
    sub = e < f.emin
    exp = np.where(big, f.emax, np.where(sub, f.emin - 1, e))
    frac = np.where(big, (1 << f.mbits) - 1, np.where(sub, frac_s, frac_n))
    code = _vectors._encode(f, sign, exp, frac.astype(np.uint64))
    return np.where(a == 0.0, sign << _U64(f.width - 1), code)


def _place(fmt: str, codes: np.ndarray) -> np.ndarray:
    return codes << _U64(13) if fmt == "tf32" else codes


def wide_exp(out_fmt: str, K: int) -> int:
    """Half-width of the ``wide`` exponent window of A and B: ``WIDE_EXP`` or less, so that
    products summed over K stay mostly inside the output format."""
    return max(2, min(WIDE_EXP, (_vectors.FLOATS[out_fmt].emax - _log2(K) // 2) // 2))


def _log2(K: int) -> int:
    return int(K).bit_length() - 1


def _float_operand(st: _Streams, name, fmt, dist, shape, scale_exp: int, K: int, out_fmt: str):
    """Codes of one float operand (``scale_exp``: log2 of its typical magnitude)."""
    f = _vectors.FLOATS[fmt]
    tag = f"{name}/{dist}"
    if dist == "bits":
        width = 32 if fmt == "tf32" else f.width
        return st.bits(tag, shape, width)
    if dist == "wide":
        lim = wide_exp(out_fmt, K) * (2 if name == "C" else 1)
        lo, hi = max(-lim + scale_exp, f.emin - f.mbits), min(lim + scale_exp, f.emax)
        exp = lo + st.below(tag + "/e", shape, hi - lo + 1)
        codes = _vectors._encode(
            f, st.bits(tag + "/s", shape, 1), exp, st.bits(tag + "/f", shape, max(f.mbits, 1))
        )
        return _place(fmt, codes)
    codes = encode_floats(fmt, st.normal(tag + "/z", shape) * 2.0**scale_exp)
    if dist == "special":
        sub = _vectors._encode(
            f, st.bits(tag + "/ss", shape, 1), f.emin - 1, st.bits(tag + "/sf", shape, f.mbits)
        )
        codes = np.where(st.below(tag + "/sub", shape, 8) == 0, sub, codes)
        table = np.asarray(_vectors.specials(fmt), np.uint64)
        spec = table[st.below(tag + "/which", shape, len(table))]
        if f.kind == "ieee":  # random NaN payloads
            emask = _U64((1 << f.ebits) - 1)
            nan = ((spec >> _U64(f.mbits)) & emask) == emask
            nan &= (spec & _U64((1 << f.mbits) - 1)) != 0
            pay = st.bits(tag + "/pay", shape, f.mbits - 1)
            spec = np.where(nan & (pay != 0), spec | pay, spec)
        rate = 16 if name == "C" else 2 * K  # about one special per dot product
        codes = np.where(st.below(tag + "/sp", shape, rate) == 0, spec, codes)
    return _place(fmt, codes)


def small_exp(ins) -> int:
    """Exponent of the ``small`` A and B: their products land at the bottom of the output
    format (its subnormals) where the input formats reach that far, else at the inputs'
    own bottom."""
    out = _vectors.FLOATS[ins.dtype]
    lo = max(_vectors.FLOATS[ins.atype].emin, _vectors.FLOATS[ins.btype].emin)
    return max((out.emin - 4) // 2, lo + 2)


def _cancel(st: _Streams, name, fmt, shape, K: int):
    """``normal`` A and B whose second half of K negates the first (A) or repeats it (B):
    exact sums are zero (up to an unpaired element); C is +-0."""
    tag = f"{name}/cancel"
    is_float = fmt in _vectors.FLOATS
    if name == "C":
        if not is_float:
            return np.zeros(shape, np.uint64)
        f = _vectors.FLOATS[fmt]
        return st.bits(tag + "/s", shape, 1) << _U64(f.width - 1)
    if is_float:
        codes = _float_operand(st, name, fmt, "normal", shape, 0, K, fmt)
        width = 32 if fmt == "tf32" else _vectors.FLOATS[fmt].width
    else:
        codes = _int_operand(st, name, fmt, "normal", shape, K)
    h = K // 2
    codes = codes.copy()
    if name == "A":
        first = codes[..., :h]
        if is_float:
            neg = first ^ _U64(1 << (width - 1))
        else:
            bits = _vectors.INTS[fmt][0]
            neg = (_U64(1 << bits) - first) & _U64((1 << bits) - 1)
        codes[..., h : 2 * h] = neg
    else:
        codes[..., h : 2 * h, :] = codes[..., :h, :]
    return codes


def _int_operand(st: _Streams, name, fmt, dist, shape, K: int):
    bits, _ = _vectors.INTS[fmt]
    mask = _U64((1 << bits) - 1)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    tag = f"{name}/{dist}"
    if dist in ("bits", "wide"):
        return st.bits(tag, shape, bits)
    if dist == "small":  # magnitudes 0 .. 3: sums far from the limits, many exact zeros
        v = st.below(tag, shape, 7) - 3
        return v.astype(np.uint64) & mask
    if dist == "normal":
        scale = 32.0 * (np.sqrt(float(K)) * 32 if name == "C" else 1)
        v = np.trunc(st.normal(tag + "/z", shape) * scale).astype(np.int64)
        return np.clip(v, lo, hi).astype(np.uint64) & mask
    if name == "C":  # near the s32 limits: a chain saturates or wraps
        small = st.below(tag + "/r", shape, 1 << 16)
        v = np.where(st.below(tag + "/side", shape, 2) == 1, hi - small, lo + small)
        return v.astype(np.uint64) & mask
    table = np.asarray([lo & int(mask), hi, 0, 1, -1 & int(mask)], np.uint64)
    return table[st.below(tag + "/which", shape, len(table))]


def inputs(case: Case) -> Problem:
    """Regenerate the inputs of ``case``."""
    case.check()
    ins = case.instruction()
    st = _Streams(case)
    G, M, N, K = case.problems, case.mt * ins.m, case.nt * ins.n, case.K
    dists = case.dists()
    shapes = {"A": (M, K), "B": (K, N), "C": (M, N)}
    fmts = {"A": ins.atype, "B": ins.btype, "C": ins.ctype}
    out = {}
    for name in "ABC":
        arr = np.zeros((G, *shapes[name]), np.uint64)
        for dist in sorted(set(DISTS)):
            sel = np.array([d == dist for d in dists])
            if not sel.any():
                continue
            fmt = fmts[name]
            if dist == "cancel":
                vals = _cancel(st, name, fmt, arr.shape, K)
            elif fmt in _vectors.FLOATS:
                se = (_log2(K) // 2 + 1) if name == "C" else 0
                if dist == "small":
                    se = small_exp(ins) * (2 if name == "C" else 1)
                vals = _float_operand(st, name, fmt, dist, arr.shape, se, K, ins.dtype)
            else:
                vals = _int_operand(st, name, fmt, dist, arr.shape, K)
            arr = np.where(sel[:, None, None], vals, arr)
        out[name] = arr.astype(np.uint32)
    return Problem(case, out["A"], out["B"], out["C"], dists)


# ----------------------------------------------------------------------------- fragments
def tiles(case: Case, A, B, C):
    """Per-warp tiles: ``A [W, S, m, k]``, ``B [W, S, k, n]``, ``C [W, m, n]`` (K padded)."""
    ins = case.instruction()
    G, S, mt, nt = case.problems, case.steps, case.mt, case.nt
    m, n, k = ins.m, ins.n, ins.k
    At = A.reshape(G, mt, m, S, k).transpose(0, 1, 3, 2, 4)  # [G, mt, S, m, k]
    Bt = B.reshape(G, S, k, nt, n).transpose(0, 3, 1, 2, 4)  # [G, nt, S, k, n]
    Ct = C.reshape(G, mt, m, nt, n).transpose(0, 1, 3, 2, 4)  # [G, mt, nt, m, n]
    At = np.broadcast_to(At[:, :, None], (G, mt, nt, S, m, k)).reshape(-1, S, m, k)
    Bt = np.broadcast_to(Bt[:, None], (G, mt, nt, S, k, n)).reshape(-1, S, k, n)
    return At, Bt, Ct.reshape(-1, m, n)


def untile(case: Case, D):
    """Tiles ``[W, m, n]`` -> matrices ``[G, M, N]``."""
    ins = case.instruction()
    G, mt, nt = case.problems, case.mt, case.nt
    D = np.asarray(D).reshape(G, mt, nt, ins.m, ins.n).transpose(0, 1, 3, 2, 4)
    return D.reshape(G, mt * ins.m, nt * ins.n)


def fragments(problem: Problem) -> dict:
    """Kernel inputs: ``a [W, S, 32, na]``, ``b [W, S, 32, nb]``, ``c [W, 32, nc]``."""
    case = problem.case
    ins = case.instruction()
    A, B = problem.padded()
    At, Bt, Ct = tiles(case, A, B, problem.C)
    return {
        "a": np.asarray(ins.fragment("a", At), np.uint32),
        "b": np.asarray(ins.fragment("b", Bt), np.uint32),
        "c": np.asarray(ins.fragment("c", Ct), np.uint32),
    }


# ----------------------------------------------------------------------------- kernel
def kernel_name(text: str, promoted: bool) -> str:
    return _kernels.kernel_name("gemm:" + text, (int(promoted),))


def kernel(ins, promoted: bool) -> _kernels.Kernel:
    """The chained kernel of ``ins``: ``d = mma(a_s, b_s, d)`` for ``s = 0 .. steps-1``
    starting from ``c``; ``promoted``: f32 totals, ``acc`` from +0 over groups of
    ``every`` steps, each group added with ``__fadd_rn``. Arguments ``(a, b, c, d, steps,
    every, warps)``; ``every`` is ignored unless ``promoted``."""
    nr = ins.nregs
    if ins.operands[0].name != "d" or any(op.reg_bits != 32 for op in ins.operands):
        raise ValueError(f"chained kernels take 32-bit register forms, not {ins.text!r}")
    if promoted and (ins.ctype != "f32" or ins.dtype != "f32"):
        raise ValueError(f"promotion needs f32 accumulators: {ins.text!r}")
    na, nb, nd = nr["a"], nr["b"], nr["d"]
    name = kernel_name(ins.text, promoted)
    asm = _kernels._Asm()
    dv = [f"d{i}" for i in range(nd)]
    av = [f"a{i}" for i in range(na)]
    bv = [f"b{i}" for i in range(nb)]
    groups = [
        _kernels._brace([asm.out(v, 32) for v in dv]),
        _kernels._brace([asm.inp(v, "r") for v in av]),
        _kernels._brace([asm.inp(v, "r") for v in bv]),
        _kernels._brace([asm.inp(v, "r") for v in dv]),  # C of this step = D so far
    ]
    mma = asm.render(f"{ins.text} " + ", ".join(groups))
    step = [
        f"      const size_t ta = (((size_t)w * steps + s) * 32 + lane) * {na};",
        f"      const size_t tb = (((size_t)w * steps + s) * 32 + lane) * {nb};",
        *[f"      const unsigned a{i} = in_a[ta + {i}];" for i in range(na)],
        *[f"      const unsigned b{i} = in_b[tb + {i}];" for i in range(nb)],
        "      " + mma.replace("\n", "\n      "),
    ]
    head = [
        f'extern "C" __global__ void __launch_bounds__(32) {name}(',
        "    const unsigned* __restrict__ in_a, const unsigned* __restrict__ in_b,",
        "    const unsigned* __restrict__ in_c, unsigned* __restrict__ out_d,",
        "    int steps, int every, int warps) {",
        "  const int w = blockIdx.x, lane = threadIdx.x;",
        "  if (w >= warps) return;",
        f"  const size_t tc = ((size_t)w * 32 + lane) * {nd};",
    ]
    if not promoted:
        body = [
            *[f"  unsigned d{i} = in_c[tc + {i}];" for i in range(nd)],
            "  for (int s = 0; s < steps; ++s) {",
            *[ln[2:] for ln in step],
            "  }",
            *[f"  out_d[tc + {i}] = d{i};" for i in range(nd)],
        ]
    else:
        body = [
            *[f"  float t{i} = __uint_as_float(in_c[tc + {i}]);" for i in range(nd)],
            "  for (int g = 0; g < steps; g += every) {",
            f"    unsigned {', '.join(f'd{i} = 0u' for i in range(nd))};",
            "    const int end = min(g + every, steps);",
            "    for (int s = g; s < end; ++s) {",
            *step,
            "    }",
            *[f"    t{i} = __fadd_rn(t{i}, __uint_as_float(d{i}));" for i in range(nd)],
            "  }",
            *[f"  out_d[tc + {i}] = __float_as_uint(t{i});" for i in range(nd)],
        ]
    src = "\n".join(head + body + ["}"]) + "\n"
    return _kernels.Kernel(
        name, ins.text, ins.arch, (int(promoted),), src, ("a", "b", "c"), (), (("d", nd, "uint32"),)
    )


def kernels(cases) -> dict:
    """Kernel name -> kernel for every (form, promoted) the cases need."""
    out = {}
    for c in cases:
        k = kernel(c.instruction(), c.promote_every is not None)
        out[k.name] = k
    return out


def run_case(runner, case: Case, frags: dict) -> np.ndarray:
    """Run a case's kernel on the GPU (``runner``: :class:`._gpu.Runner`); ``d`` registers."""
    cp = runner.cp
    k = kernel(case.instruction(), case.promote_every is not None)
    fn = runner.function(k.name)
    args = [cp.asarray(np.ascontiguousarray(frags[n])) for n in ("a", "b", "c")]
    out = cp.zeros((case.warps, 32, k.outputs[0][1]), dtype=cp.uint32)
    every = np.int32(case.promote_every or case.steps)
    fn((case.warps,), (32,), (*args, out, np.int32(case.steps), every, np.int32(case.warps)))
    cp.cuda.runtime.deviceSynchronize()
    return cp.asnumpy(out)


# ----------------------------------------------------------------------------- golden
def group_name(case: Case) -> str:
    """``gemm-<type family>``, e.g. ``gemm-fp8``."""
    return "gemm-" + _golden.group_name(case.instruction()).split("-", 1)[1]


def make_record(problem: Problem, d: np.ndarray, info: dict, date: str) -> _golden.Record:
    c = problem.case
    outputs = {"d": np.ascontiguousarray(d, np.uint32)}
    meta = {
        "format": FORMAT,
        "kind": "gemm",
        "text": c.text,
        "arch": c.arch,
        "promote_every": c.promote_every,
        "steps": c.steps,
        "K": c.K,
        "problems": c.problems,
        "mt": c.mt,
        "nt": c.nt,
        "seed": c.seed,
        "key": c.key,
        "generator": GENERATOR,
        "dists": list(problem.dists),
        "device": info.get("device", ""),
        "driver": info.get("driver", ""),
        "cuda_runtime": info.get("cuda_runtime", ""),
        "nvcc": info.get("nvcc", ""),
        "date": date,
        "inputs_crc32": problem.crc32(),
        "outputs_crc32": _golden.outputs_crc32(outputs),
        "outputs": {n: [a.dtype.str, list(a.shape)] for n, a in outputs.items()},
    }
    return _golden.Record(meta, outputs)


def case_of(record: _golden.Record) -> Case:
    m = record.meta
    if m.get("kind") != "gemm":
        raise ValueError(f"{m['text']!r} is not a chained GEMM record")
    return Case(
        m["text"],
        m["promote_every"],
        m["steps"],
        m["K"],
        m["seed"],
        m["problems"],
        m["mt"],
        m["nt"],
        m["arch"],
    )


def regenerate(record: _golden.Record) -> Problem:
    """The inputs of a GEMM record, CRC32-checked against the record."""
    m = record.meta
    if m.get("generator") != GENERATOR:
        raise ValueError(
            f"{m['key']!r} was captured with generator {m.get('generator')!r}; this is "
            f"{GENERATOR!r}"
        )
    p = inputs(case_of(record))
    if p.crc32() != m["inputs_crc32"]:
        raise ValueError(
            f"{m['key']!r}: regenerated inputs have CRC32 {p.crc32():#010x}, the record "
            f"{m['inputs_crc32']:#010x}: the generator drifted or the record was modified"
        )
    return p


def save(directory: str, records) -> dict:
    """Write records into ``gemm-*.npz`` under ``directory`` (same key: replaced)."""
    return _golden.write_groups(
        directory, records, lambda r: group_name(case_of(r)), lambda r: r.meta["key"]
    )


def golden_files(directory: str) -> list:
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.startswith("gemm-") and n.endswith(".npz")
    )


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
