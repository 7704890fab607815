"""The compiled block-scaled kernel's fusion is a PTX routine (``gemm._block_kernel._ptx_fuse``)
that only a GPU runs. Here a small interpreter of the PTX instructions it uses (written
from the PTX ISA's definitions: two's-complement wrap-around, shifts clamped to the
register width, round-toward-zero conversion and multiply with exact arithmetic on
rationals) runs the routine's text on raw-bit inputs, and its D bits must equal the
interpreted kernel's int32 fusion (``_fuse_planes``), which the other block-kernel tests
tie to the XLA formulation."""

import re
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
import pytest
from _block_inputs import raw_c

from jaxmma.gemm import _block_kernel

M32, M64 = (1 << 32) - 1, (1 << 64) - 1


def _signed(x, bits):
    return x - (1 << bits) if x >> (bits - 1) else x


#: (significand bits, lowest normal exponent, exponent bias) of the two float widths
_WIDTHS = {32: (23, -126, 127), 64: (52, -1022, 1023)}


def _float_value(bits, width=32):
    man, emin, bias = _WIDTHS[width]
    e, f = (bits >> man) & ((1 << (width - 1 - man)) - 1), bits & ((1 << man) - 1)
    if e == (1 << (width - 1 - man)) - 1:  # Inf or NaN: a Python float
        v = float("nan") if f else float("inf")
        return -v if bits >> (width - 1) else v
    if e == 0:
        v = Fraction(f) * Fraction(2) ** (emin - man)
    else:
        v = Fraction((1 << man) | f) * Fraction(2) ** (e - bias - man)
    return -v if bits >> (width - 1) else v


def _f32_value(bits):
    return _float_value(bits, 32)


def _round_float(v: Fraction, mode: str, width=32) -> int:
    """Bits of ``v`` rounded to the float format of ``width`` toward zero (``"rz"``),
    toward minus infinity (``"rm"``) or to nearest even (``"rn"``); beyond the largest
    finite value as IEEE 754 has it for each direction."""
    man, emin, bias = _WIDTHS[width]
    sign_bit = 1 << (width - 1)
    emax = bias
    inf = ((1 << (width - 1 - man)) - 1) << man
    if isinstance(v, float):  # Inf or NaN in, Inf or the default NaN out
        if v != v:
            return inf | (1 << (man - 1))
        return inf | (sign_bit if v < 0 else 0)
    if v == 0:
        return 0
    sign = sign_bit if v < 0 else 0
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - man)  # subnormals: the grid of 2**(emin - man)
    q, rest = divmod(a, quantum)
    up = {"rz": False, "rm": bool(sign) and rest > 0}.get(mode)
    if mode == "rn":
        up = rest * 2 > quantum or (rest * 2 == quantum and q % 2 == 1)
    mag = (q + up) * quantum
    if mag == 0:
        return sign  # a signed zero
    if mag >= Fraction(2) ** (emax + 1):
        return sign | (inf - 1 if mode == "rz" or (mode == "rm" and not sign) else inf)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    if e < emin:
        return sign | int(mag / Fraction(2) ** (emin - man))
    return sign | ((e + bias) << man) | (int(mag / Fraction(2) ** (e - man)) - (1 << man))


def _round_f32(v: Fraction, mode: str) -> int:
    return _round_float(v, mode, 32)


def _parse(asm):
    """The instructions as ``(predicate, op, args)``; a label as ``(None, "label", [name])``
    (LLVM's ``${:uid}`` made one number: one routine at a time here)."""
    prog = []
    for line in asm.replace("${:uid}", "0").splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        if line.endswith(":"):
            prog.append((None, "label", [line[:-1]]))
            continue
        pred = None
        if line.startswith("@"):
            p, line = line.split(None, 1)
            pred = (p[1:].lstrip("!"), p.startswith("@!"))
        op, rest = line.split(None, 1)
        vec = re.search(r"\{(.*)\}", rest)
        if vec:
            args = [rest[: vec.start()].strip().rstrip(","), tuple(vec.group(1).split(", "))]
        else:
            args = [a.strip() for a in rest.split(",")]
        prog.append((pred, op, args))
    return prog


def _run(prog, inputs, outs=1, trace=None):
    """``inputs`` the values of ``$outs ...`` (uint32); returns ``$0``, or the list
    ``$0 ... $(outs - 1)`` where ``outs > 1``. One lane: ``vote.sync.all`` is its own
    predicate. ``trace``: a list that gets the labels of the branches taken."""
    reg = {f"${i + outs}": v for i, v in enumerate(inputs)}
    labels = {args[0]: i for i, (_, op, args) in enumerate(prog) if op == "label"}

    def val(a):
        if isinstance(a, tuple):  # {lo, hi}
            return val(a[0]) | (val(a[1]) << 32)
        if a in reg:
            return reg[a]
        if a.startswith(("0f", "0d")):  # a float32 or float64 immediate, as its bits
            return int(a[2:], 16)
        return int(a) & M32  # an immediate

    pc = 0
    while pc < len(prog):
        pred, op, args = prog[pc]
        pc += 1
        if op == "label" or (pred is not None and reg[pred[0]] == pred[1]):
            continue
        if op == "bra.uni":
            pc = labels[args[0]]
            if trace is not None:
                trace.append(args[0])
            continue
        d, src = args[0], [val(a) for a in args[1:]]
        base = op.split(".")[0]
        kind = op.split(".")[-1]
        if op in ("mov.b32", "mov.b64", "vote.sync.all.pred"):
            out = src[0]
        elif op == "bfe.u32":
            out = (src[0] >> src[1]) & ((1 << src[2]) - 1)
        elif op == "or.pred":
            out = src[0] or src[1]
        elif base in ("and", "or"):
            out = (src[0] & src[1]) if base == "and" else (src[0] | src[1])
        elif base == "setp":  # setp.cmp{.and,.or}.type d, a, b{, c}
            cmp, t, both = op.split(".")[1], kind, op.split(".")[2:-1]
            if t in ("f32", "f64"):
                x, y = [_float_value(v, int(t[1:])) for v in src[:2]]
            else:
                x, y = src[:2] if t == "u32" else [_signed(s, 32) for s in src[:2]]
            cmps = {"ne": x != y, "eq": x == y, "lt": x < y, "le": x <= y, "ge": x >= y}
            out = cmps[cmp]
            if both:  # the comparison combined with a predicate
                out = (out and src[2]) if both[0] == "and" else (out or src[2])
        elif base == "selp":
            out = src[0] if src[2] else src[1]
        elif op in ("max.u32", "max.s32"):
            x, y = src if kind == "u32" else [_signed(s, 32) for s in src]
            out = max(x, y) & M32
        elif op == "lop3.b32":  # bit i of the result: bit (a_i b_i c_i) of the table
            table = src[3]
            out = 0
            for i in range(32):
                idx = ((src[0] >> i) & 1) << 2 | ((src[1] >> i) & 1) << 1 | ((src[2] >> i) & 1)
                out |= ((table >> idx) & 1) << i
        elif op == "mad.lo.s32":  # the low 32 bits of a * b + c
            out = (src[0] * src[1] + src[2]) & M32
        elif op in ("add.s32", "sub.s32"):
            out = (src[0] + (src[1] if base == "add" else -src[1])) & M32
        elif op in ("add.s64", "sub.s64"):
            out = (src[0] + (src[1] if base == "add" else -src[1])) & M64
        elif op == "neg.s64":
            out = -src[0] & M64
        elif op == "abs.s32":
            out = abs(_signed(src[0], 32)) & M32
        elif op == "shl.b32":
            out = (src[0] << min(src[1], 32)) & M32
        elif op == "shr.s32":
            out = (_signed(src[0], 32) >> min(src[1], 32)) & M32
        elif op == "shr.b64":
            out = src[0] >> min(src[1], 64)
        elif op == "cvt.rz.f32.s64":
            out = _round_f32(Fraction(_signed(src[0], 64)), "rz")
        elif op == "mul.rz.f32":
            out = _round_f32(_f32_value(src[0]) * _f32_value(src[1]), "rz")
        elif op in ("add.rm.f32", "sub.f32"):
            x, y = _f32_value(src[0]), _f32_value(src[1])
            out = _round_f32(x + y if base == "add" else x - y, "rm" if base == "add" else "rn")
        elif base in ("add", "sub", "mul", "fma") and kind in ("f32", "f64"):
            width = int(kind[1:])
            x = [_float_value(v, width) for v in src]
            if not all(isinstance(v, Fraction) for v in x):  # IEEE 754 on Inf and NaN
                x = [float(v) for v in x]
            if base == "fma":
                exact = x[0] * x[1] + x[2]
            elif base == "mul":
                exact = x[0] * x[1]
            else:
                exact = x[0] + x[1] if base == "add" else x[0] - x[1]
            out = _round_float(exact, op.split(".")[1], width)
        elif op == "abs.f64":
            out = src[0] & (M64 >> 1)
        elif op == "cvt.f64.f32":
            out = _round_float(_f32_value(src[0]), "rn", 64)
        elif op == "cvt.rz.f32.f64":
            out = _round_f32(_float_value(src[0], 64), "rz")
        else:
            raise AssertionError(f"an instruction the interpreter does not know: {op}")
        reg[d] = out
    return reg["$0"] if outs == 1 else [reg[f"${i}"] for i in range(outs)]


def _inputs(rng, n, man, rep):
    """C bits, the four groups' dots ``T ss + count / 32`` (float32) and the scale groups'
    exponent words, as the kernel makes them: all-zero groups (count 0, term 0),
    cancelling ones (term 0, count > 0), scales of significand 0 (exponent word from
    ``_ABSENT``), the largest terms, and exponents over the scale format's range, far
    apart so that terms truncate."""
    c = raw_c(rng, (4, n)).reshape(-1)[:n]
    lo, hi = (-9, 8) if man else (-127, 127)  # the scale format's exponents
    big = 16 * 144 * (225 if man else 1)  # the largest |T ss|
    values, exps = [], []
    for _ in range(4):
        m = rng.integers(-big, big + 1, n)
        m = np.where(rng.random(n) < 0.1, rng.choice([-big, big, -1, 1], n), m)
        m = np.where(rng.random(n) < 0.1, 0, m)  # cancelling groups
        count = rng.integers(1, 17, n)
        count = np.where(rng.random(n) < 0.15, 0, count)  # all-zero groups
        m = np.where(count == 0, 0, m)
        values.append((m + count / 32).astype(np.float32))
    for _ in range(4 // rep):
        e = rng.integers(lo, hi + 1, (2, n)).sum(0) - 2
        absent = 2 * _block_kernel._ABSENT - 2  # both scales of significand 0
        exps.append(np.where(rng.random(n) < 0.05, absent, e).astype(np.int32))
    return c.view(np.int32), values, exps


def _int32_fusion(c, values, exps, man, rep):
    """The interpreted kernel's int32 fusion (``_fuse_planes``) of raw inputs: D bits."""
    planes = [jnp.asarray(v) for v in values], [jnp.asarray(e) for e in exps]
    return np.asarray(_block_kernel._fuse_planes(jnp.asarray(c), *planes, man, rep)).view(np.uint32)


@pytest.mark.parametrize("man, rep", [(3, 1), (0, 2), (0, 1)], ids=["nvfp4", "mxfp4", "4x-ue8m0"])
def test_ptx_fusion_gives_the_int32_fusion_bits(man, rep):
    rng = np.random.default_rng(11 + man + rep)
    n = 500
    c, values, exps = _inputs(rng, n, man, rep)
    want = _int32_fusion(c, values, exps, man, rep)
    prog = _parse(_block_kernel._ptx_fuse(4, rep, man))
    words = (
        [c.view(np.uint32)]
        + [v.view(np.uint32) for v in values]
        + [e.view(np.uint32) for e in exps]
    )
    got = np.array([_run(prog, [int(w[i]) for w in words]) for i in range(n)], np.uint32)
    kinds = want & 0x7F800000
    assert (kinds == 0).any() and (kinds == 0x7F800000).any() and (want == 0).any()
    np.testing.assert_array_equal(got, want)


def _near_inputs(rng, n, man, rep, pack):
    """Inputs around the fast routine's condition (:func:`_block_kernel._bounds`), in
    groups of ``pack`` elements (one routine; each element its own row and column):

    * a fifth of the groups inside the condition (scale exponents within the spread
      limits, C's exponent field between ``lo`` and ``hi``): the fast routine runs;
    * a half the same but for one element whose field is ``lo - 1``, ``lo``, ``hi`` or
      ``hi + 1``, its largest group at the bound and cancelled, so that its result is
      as small as C: the fast routine runs exactly where that field is inside, and a
      bound one off lets a truncated term through;
    * the rest anything near the limits (spreads one past them, fields within two of
      the bounds, C zero, any C bits): mostly the full routine."""
    off = 2 * man + 2
    groups = np.arange(n) // pack
    kind = rng.choice(3, n // pack, p=[0.2, 0.5, 0.3])[groups]  # inside, one near, free
    first = np.arange(n) % pack == rng.integers(0, pack, n // pack)[groups]
    edge = (kind == 1) & first  # the one element near a bound
    _, values, _ = _inputs(rng, n, man, rep)
    base_a, base_b = rng.integers(-14, 12, n), rng.integers(-14, 12, n)
    wide_a, wide_b = np.where(kind == 2, 15, 14), np.where(kind == 2, 35 - off - 11, 35 - off - 12)
    eas, ebs = [], []
    for _ in range(4 // rep):
        eas.append((base_a + rng.integers(0, wide_a)).astype(np.int32))
        ebs.append((base_b + rng.integers(0, wide_b)).astype(np.int32))
    # the largest exponents of a row and of a column often in one group: mx reaches its bound
    same = (rng.random(n) < 0.5) | edge
    eas[0] = np.where(same, np.max(eas, 0), eas[0]).astype(np.int32)
    ebs[0] = np.where(same, np.max(ebs, 0), ebs[0]).astype(np.int32)
    # groups 0 and 1 cancel in half the elements (same exponent, opposite sums): the
    # result is then as small as C and the other groups, and a truncated bit shows
    cancel = (rng.random(n) < 0.5) | edge
    if rep == 1:
        eas[1] = np.where(cancel, eas[0], eas[1]).astype(np.int32)
        ebs[1] = np.where(cancel, ebs[0], ebs[1]).astype(np.int32)
    m0 = np.floor(values[0])
    count = rng.integers(1, 17, n) / 32
    values[1] = np.where(cancel, -m0 + count, values[1]).astype(np.float32)
    for g in (2, 3):  # near a bound, the other groups' products cancel too: the sum is C
        values[g] = np.where(edge, rng.integers(1, 17, n) / 32, values[g]).astype(np.float32)
    lo, hi = (
        np.asarray(x)
        for x in _block_kernel._bounds(
            [jnp.asarray(e) for e in eas], [jnp.asarray(e) for e in ebs], man
        )
    )
    inside = lo + (rng.random(n) * (np.maximum(hi, lo) - lo + 1)).astype(np.int32)
    near = np.where(rng.random(n) < 0.5, lo, hi) + rng.integers(-2, 3, n)
    near = np.where(edge, np.where(rng.random(n) < 0.5, lo, hi + 1) - rng.integers(0, 2, n), near)
    field = np.where((kind == 2) | edge, near, inside)
    field = np.clip(field, 1, 254).astype(np.uint32)
    c = (rng.integers(0, 2, n, dtype=np.uint32) << 31) | (field << 23)
    c |= rng.integers(0, 1 << 23, n, dtype=np.uint32)
    odd = rng.random(n)
    c = np.where((kind == 2) & (odd < 0.1), 0, c)  # C zero: only hi counts
    raw = raw_c(rng, (4, n)).reshape(-1)[:n]
    c = np.where((kind == 2) & (odd > 0.9), raw, c).astype(np.uint32)
    exps = [a + b for a, b in zip(eas, ebs, strict=True)]
    return c.view(np.int32), values, exps, (lo, hi)


def _run_packed(text, pack, c, values, exps, lo, hi):
    """The packed routine's text run on each ``pack`` elements in turn: the D bits, and
    how many routines took the fast branch (straight to ``DONE``)."""
    prog = _parse(text)
    words = [c, *values, *exps, lo, hi]
    words = [np.asarray(w).view(np.uint32) for w in words]
    got, fast = np.zeros(len(c), np.uint32), 0
    for i in range(0, len(c), pack):
        trace = []
        inputs = [int(w[i + e]) for w in words for e in range(pack)]
        got[i : i + pack] = _run(prog, inputs, outs=pack, trace=trace)
        fast += trace == ["DONE0"]
    return got, fast


@pytest.mark.parametrize("man, rep", [(3, 1), (0, 2)], ids=["nvfp4", "mxfp4"])
def test_packed_routine_takes_the_fast_path_only_where_it_gives_the_same_bits(man, rep):
    """The compiled kernel's routine (``_ptx_packed``: a warp vote, then the fast routine
    or the full one, :data:`PACK` elements a routine) against the int32 fusion, on
    inputs around the fast routine's condition; both branches must run. C's bound
    ``lo`` one lower fails here; a looser ``hi`` or spread only truncates bits that the
    float32 result drops on these inputs, and the test below shows that dropping the
    condition altogether fails."""
    rng = np.random.default_rng(23 + man)
    pack, n = _block_kernel.PACK, 480
    c, values, exps, (lo, hi) = _near_inputs(rng, n, man, rep, pack)
    want = _int32_fusion(c, values, exps, man, rep)
    text = _block_kernel._ptx_packed(4, rep, man, pack)
    got, fast = _run_packed(text, pack, c, values, exps, lo, hi)
    assert 0 < fast < n // pack, fast  # both routines ran
    np.testing.assert_array_equal(got, want)


def test_fast_routine_alone_differs_where_the_condition_refuses():
    """The condition is needed: the fast routine run on every element (the vote forced
    true) differs from the int32 fusion on these inputs, so the test above can fail."""
    man, rep = 3, 1
    rng = np.random.default_rng(5)
    pack, n = _block_kernel.PACK, 480
    c, values, exps, (lo, hi) = _near_inputs(rng, n, man, rep, pack)
    want = _int32_fusion(c, values, exps, man, rep)
    text = _block_kernel._ptx_packed(4, rep, man, pack)
    text = text.replace("@!%all bra.uni", "@%never bra.uni").replace(
        "vote.sync.all.pred %all, %all, -1", "setp.ne.u32 %never, 0, 0"
    )
    got, _ = _run_packed(text, pack, c, values, exps, lo, hi)
    assert (got != want).sum() > 0
