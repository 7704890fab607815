"""A small interpreter of the PTX instructions the kernels' inline routines use, written
from the PTX ISA's definitions: two's-complement wrap-around, shifts clamped to the
register width, and every floating-point operation done exactly on rationals, then
rounded in the instruction's mode. One lane: ``vote.sync.all`` is its own predicate."""

import re
from fractions import Fraction

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
        elif op in ("max.u32", "max.s32", "min.s32"):
            x, y = src if kind == "u32" else [_signed(s, 32) for s in src]
            out = (max(x, y) if base == "max" else min(x, y)) & M32
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
