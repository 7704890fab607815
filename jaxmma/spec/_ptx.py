"""Parse PTX instruction text of sections 9.7.14 and 9.7.15 into an :class:`Instruction`.

Parsing reads every qualifier, validates it against the one table of forms in
:mod:`jaxmma._spec`, and refuses with a ``ValueError`` that names the qualifier, the value
and the allowed values. ``arch`` is checked against the form's target notes.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import NamedTuple

from . import _spec
from ._spec import Form

# Architectures the numerics models know, oldest first (PTX target numbers).
ARCH_NUMBERS = (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
NEWEST = 120  # default arch: sm_120, or sm_120a for architecture-specific forms

FLOAT_TYPES = ("f16", "bf16", "tf32", "f32", "f64", *_spec.F8F6F4)
INT_TYPES = ("s8", "u8", "s4", "u4", "b1", "s32")
SCALE_TYPES = ("ue8m0", "ue4m3")
ELEMENT_TYPES = FLOAT_TYPES + INT_TYPES
STATE_SPACES = ("shared", "shared::cta", "global")
_SHAPE_RE = re.compile(r"^m\d+n\d+(k\d+)?$")


class Operand(NamedTuple):
    """One register operand in PTX operand order.

    ``name``: d, a, b, c, e, scale_a, scale_b, r (movement registers). ``nregs``: registers
    per lane. ``reg_bits``: 32 or 64. ``fmt``: element format (PTX name) or None.
    ``elem_bits``: bits an element occupies in the register (containers included).
    ``output``: written by the instruction.
    """

    name: str
    nregs: int
    reg_bits: int
    fmt: str | None
    elem_bits: int
    output: bool = False

    @property
    def elems_per_reg(self) -> int:
        return self.reg_bits // self.elem_bits


#: the most characters of a user's text or value that a message echoes
SHOWN = 200


def shown(value) -> str:
    """``repr(value)`` for a message, cut to :data:`SHOWN` characters: a long text (a
    megabyte pasted by mistake) is never echoed whole."""
    r = repr(value)
    return r if len(r) <= SHOWN else f"{r[:SHOWN]}... ({len(r)} characters)"


def _fail(qualifier: str, value, allowed, context: str = "") -> ValueError:
    allowed = ", ".join(sorted({str(a) for a in allowed})) or "(none)"
    where = f" for {shown(context)[1:-1]}" if context else ""
    return ValueError(f"invalid {qualifier} {shown(value)}{where}; allowed: {allowed}")


# ------------------------------------------------------------------------------- arch
class Arch(NamedTuple):
    number: int
    suffix: str  # "", "a" or "f"

    @property
    def name(self) -> str:
        return f"sm_{self.number}{self.suffix}"


def parse_arch(arch: str) -> Arch:
    """Parse ``"sm_90"``, ``"sm_90a"``, ``"sm_120f"`` (or ``"90"``) into an :class:`Arch`."""
    if not isinstance(arch, str):
        raise TypeError(f"arch must be a string like 'sm_90', got {type(arch).__name__}")
    m = re.fullmatch(r"(?:sm_)?(\d+)([af]?)", arch.strip().lower())
    if not m or int(m.group(1)) not in ARCH_NUMBERS:
        raise _fail("arch", arch, [f"sm_{n}" for n in ARCH_NUMBERS] + ["(with a/f suffix)"])
    return Arch(int(m.group(1)), m.group(2))


def runs_on(form: Form, arch: Arch) -> bool:
    """Whether the form's target notes allow ``arch``."""
    if arch.number < form.target.min_sm:
        return False
    if form.target.family:
        return arch.suffix in ("a", "f") and arch.number in form.target.family
    return True


def _check_arch(form: Form, arch: Arch, text: str) -> None:
    if runs_on(form, arch):
        return
    need = f"sm_{form.target.min_sm} or newer"
    if form.target.family:
        need = " or ".join(f"sm_{n}a" for n in sorted(form.target.family))
    raise ValueError(f"arch {arch.name!r} cannot run {shown(text)}; it requires {need}")


def default_arch(form: Form) -> Arch:
    """The newest architecture that runs the form (``tcgen05.mma``: ``sm_100a``, B200)."""
    if form.opcode == "tcgen05.mma":
        return Arch(100, "a")
    for n in reversed([x for x in ARCH_NUMBERS if x <= NEWEST]):
        for suffix in ("", "a"):
            a = Arch(n, suffix)
            if runs_on(form, a):
                return a
    raise AssertionError(f"no architecture runs {form}")  # the table guarantees one


# ------------------------------------------------------------------------------- tokens
@dataclasses.dataclass
class _Tokens:
    """Qualifiers of one instruction text, sorted into their categories."""

    text: str
    opcode: str = ""
    sparse: str | None = None
    frag: str | None = None
    shape: str | None = None
    layouts: list = dataclasses.field(default_factory=list)
    types: list = dataclasses.field(default_factory=list)
    stype: str | None = None
    kind: str | None = None
    block_scale: bool = False
    scale_vec: str | None = None
    satfinite: bool = False
    rounding: str | None = None
    bitop: str | None = None
    popc: bool = False
    num: str | None = None
    trans: bool = False
    ss: str | None = None
    elem: str | None = None
    sync: bool = False
    aligned: bool = False

    def set_once(self, name, value):
        if getattr(self, name) not in (None, False):
            qual = "." + (name if value is True else value)
            raise ValueError(
                f"qualifier {shown(qual)} given twice (as {name}) in {shown(self.text)}"
            )
        setattr(self, name, value)


def _strip(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    head = text.strip().split(None, 1)
    if not head:
        raise ValueError(
            "text is empty; expected an instruction such as "
            "'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32'"
        )
    return head[0].rstrip(";")


def _tokenize(text: str) -> _Tokens:
    word = _strip(text)
    parts = word.split(".")
    t = _Tokens(text=word)
    head = parts[0]
    rest = parts[1:]
    if head == "mma" and rest and rest[0] in ("sp", "sp::ordered_metadata"):
        t.sparse = rest.pop(0)
    elif head == "wgmma":
        if not rest or rest[0] != "mma_async":
            raise _fail("opcode", word, _spec.OPCODES)
        head = f"wgmma.{rest.pop(0)}"
        if rest and rest[0] == "sp":
            raise ValueError(
                f"{shown(word)}: wgmma.mma_async.sp (sparse A) is not emulated yet; "
                "the dense wgmma.mma_async forms are"
            )
    elif head == "wmma":
        if not rest or rest[0] not in ("load", "store", "mma"):
            raise _fail("opcode", word, _spec.OPCODES)
        head = f"wmma.{rest.pop(0)}"
        if head in ("wmma.load", "wmma.store"):
            allowed = ("a", "b", "c") if head == "wmma.load" else ("d",)
            if not rest or rest[0] not in allowed:
                got = rest[0] if rest else None
                raise _fail(f"{head} matrix qualifier", got, allowed, word)
            t.frag = rest.pop(0)
    if head not in _spec.OPCODES:
        raise _fail("opcode", parts[0], _spec.OPCODES + ("mma.sp", "mma.sp::ordered_metadata"))
    t.opcode = head
    i = 0
    while i < len(rest):
        q = rest[i]
        if q in ("sync", "aligned"):
            t.set_once(q, True)
        elif _SHAPE_RE.match(q):
            t.set_once("shape", q)
        elif q in ("row", "col"):
            t.layouts.append(q)
        elif q in ELEMENT_TYPES:
            t.types.append(q)
        elif q in SCALE_TYPES:
            t.set_once("stype", q)
        elif q.startswith("kind::"):
            t.set_once("kind", q[len("kind::") :])
        elif q == "block_scale":
            t.set_once("block_scale", True)
        elif q.startswith("scale_vec::"):
            t.set_once("scale_vec", q[len("scale_vec::") :])
        elif q == "satfinite":
            t.set_once("satfinite", True)
        elif q in ("rn", "rz", "rm", "rp"):
            t.set_once("rounding", q)
        elif q in ("xor", "and"):
            t.set_once("bitop", q)
        elif q == "popc":
            t.set_once("popc", True)
        elif q in ("x1", "x2", "x4"):
            t.set_once("num", q)
        elif q == "trans":
            t.set_once("trans", True)
        elif q in STATE_SPACES:
            t.set_once("ss", q)
        elif q in ("b16", "b8"):
            t.set_once("elem", q)
        elif q == "b8x16" and i + 1 < len(rest) and rest[i + 1] in ("b6x16_p32", "b4x16_p64"):
            t.set_once("elem", f"b8x16.{rest[i + 1]}")
            i += 1
        else:
            raise ValueError(f"unknown qualifier {shown('.' + q)} in {shown(word)}")
        i += 1
    if not (t.sync and t.aligned):
        missing = [q for q in ("sync", "aligned") if not getattr(t, q)]
        raise ValueError(
            f"{shown(word)} lacks the mandatory qualifier(s) " + ", ".join("." + m for m in missing)
        )
    if t.shape is None:
        raise ValueError(f"{shown(word)} has no shape qualifier (such as .m16n8k16)")
    return t


# ------------------------------------------------------------------------------- matching
def _narrow(cands, pred, qualifier, value, allowed_of, context):
    kept = [f for f in cands if pred(f)]
    if not kept:
        allowed = {allowed_of(f) for f in cands}
        if value is None:
            shown = ", ".join(sorted(str(a) for a in allowed))
            raise ValueError(f"missing {qualifier} qualifier for {context}; allowed: {shown}")
        raise _fail(qualifier, value, {a for a in allowed if a is not None} or allowed, context)
    return kept


def _match_mma(t: _Tokens) -> tuple[Form, dict]:
    opname = "mma" + (f".{t.sparse}" if t.sparse else "")
    cands = [f for f in _spec.forms(t.opcode) if f.sparse == t.sparse]
    cands = _narrow(
        cands, lambda f: f.shape == t.shape, "shape", t.shape, lambda f: f.shape, opname
    )
    ctx = f"{opname}.{t.shape}"
    ntypes = (
        2
        if (
            t.opcode == "wmma.mma"
            and t.types
            and all(x in ("f16", "f32") for x in t.types)
            and len(t.types) == 2
        )
        else 4
    )
    if len(t.types) != ntypes:
        raise ValueError(
            f"{shown(t.text)}: expected the element types .dtype.atype.btype.ctype, "
            f"got {len(t.types)} type qualifier(s) {shown(t.types)}"
        )
    if ntypes == 2:
        d, c = t.types
        a = b = "f16"
    else:
        d, a, b, c = t.types
    cands = _narrow(cands, lambda f: f.atype == a, ".atype", a, lambda f: f.atype, ctx)
    cands = _narrow(
        cands, lambda f: f.btype == b, ".btype", b, lambda f: f.btype, f"{ctx} with .atype .{a}"
    )
    cands = _narrow(
        cands, lambda f: f.kind == t.kind, ".kind", t.kind, lambda f: f.kind, f"{ctx}.{a}.{b}"
    )
    cands = _narrow(cands, lambda f: f.ctype == c, ".ctype", c, lambda f: f.ctype, f"{ctx}.{a}.{b}")
    cands = _narrow(
        cands, lambda f: f.dtype == d, ".dtype", d, lambda f: f.dtype, f"{ctx} with .ctype .{c}"
    )
    scaled = any(f.stype for f in cands)
    if t.block_scale != scaled:
        what = "requires" if scaled else "does not take"
        raise ValueError(f"{shown(t.text)}: .kind::{t.kind} {what} the .block_scale qualifier")
    scale_vec = None
    if scaled:
        if t.stype is None:
            raise _fail(".stype", None, {f.stype for f in cands}, ctx)
        if t.scale_vec is None:
            dflt = [f for f in cands if f.scale_vec_default]
            if not dflt:
                raise ValueError(
                    f"{shown(t.text)}: .kind::{t.kind} requires an explicit "
                    ".scale_vec_size; allowed: "
                    + ", ".join(sorted(f".scale_vec::{f.scale_vec}" for f in cands))
                )
            cands = dflt
        else:
            cands = _narrow(
                cands,
                lambda f: f.scale_vec == t.scale_vec,
                ".scale_vec_size",
                t.scale_vec,
                lambda f: f.scale_vec,
                f"{ctx}.kind::{t.kind}",
            )
        cands = _narrow(
            cands,
            lambda f: f.stype == t.stype,
            ".stype",
            t.stype,
            lambda f: f.stype,
            f"{ctx}.kind::{t.kind}.scale_vec::{cands[0].scale_vec}",
        )
        scale_vec = cands[0].scale_vec
    elif t.stype or t.scale_vec:
        raise ValueError(f"{shown(t.text)}: .stype/.scale_vec_size need .block_scale")
    if t.bitop or t.popc or any(f.bitops for f in cands):
        if not any(f.bitops for f in cands):
            raise ValueError(f"{shown(t.text)}: .{t.bitop or 'popc'} applies to .b1 only")
        if not t.popc:
            raise ValueError(f"{shown(t.text)}: single-bit mma needs .popc after .{t.bitop}")
        cands = _narrow(
            cands, lambda f: t.bitop in f.bitops, "bitOp", t.bitop, lambda f: f.bitops[0], ctx
        )
    form = cands[0]
    assert len(cands) == 1, cands
    quals = _layouts_quals(t, form, 2, ctx)
    if t.satfinite and not form.satfinite:
        raise ValueError(f"{shown(t.text)}: .satfinite applies to integer forms only")
    if t.rounding and not form.rounding:
        raise ValueError(f"{shown(t.text)}: rounding modifier .{t.rounding} applies to .f64 only")
    for bad in ("num", "trans", "ss", "elem", "frag"):
        if getattr(t, bad):
            raise ValueError(f"{shown(t.text)}: qualifier {bad} does not apply to {t.opcode}")
    quals.update(
        satfinite=t.satfinite,
        rounding=(t.rounding or "rn") if form.rounding else None,
        bitop=t.bitop,
        scale_vec=scale_vec,
    )
    return form, quals


def _match_wgmma(t: _Tokens) -> tuple[Form, dict]:
    """``wgmma.mma_async.sync.aligned.shape{.satfinite}.dtype.atype.btype{.and.popc}``."""
    op = t.opcode
    if t.layouts:
        raise ValueError(
            f"{shown(t.text)}: wgmma.mma_async takes no layout qualifiers (.row/.col); A is "
            "row-major and B column-major, and the .f16/.bf16 transposes are the "
            "imm-trans-a/imm-trans-b operands (they do not change the product)"
        )
    if len(t.types) != 3:
        raise ValueError(
            f"{shown(t.text)}: expected the element types .dtype.atype.btype, "
            f"got {len(t.types)} type qualifier(s) {shown(t.types)}"
        )
    d, a, b = t.types
    cands = list(_spec.forms(op))
    cands = _narrow(cands, lambda f: f.atype == a, ".atype", a, lambda f: f.atype, op)
    cands = _narrow(
        cands, lambda f: f.btype == b, ".btype", b, lambda f: f.btype, f"{op} with .atype .{a}"
    )
    cands = _narrow(cands, lambda f: f.dtype == d, ".dtype", d, lambda f: f.dtype, f"{op}.{a}.{b}")
    ctx = f"{op}.{d}.{a}.{b}"
    cands = _narrow(cands, lambda f: f.shape == t.shape, "shape", t.shape, lambda f: f.shape, ctx)
    (form,) = cands
    if t.bitop or t.popc or form.bitops:
        if not form.bitops:
            raise ValueError(f"{shown(t.text)}: .{t.bitop or 'popc'} applies to .b1 only")
        if not (t.bitop and t.popc):
            raise ValueError(f"{shown(t.text)}: single-bit wgmma.mma_async needs .and.popc")
        if t.bitop not in form.bitops:
            raise _fail("bitOp", t.bitop, form.bitops, ctx)
    if t.satfinite and not form.satfinite:
        raise ValueError(f"{shown(t.text)}: .satfinite applies to the .s8/.u8 forms only")
    for bad in ("rounding", "kind", "block_scale", "stype", "scale_vec", "num", "trans", "ss"):
        if getattr(t, bad):
            raise ValueError(f"{shown(t.text)}: qualifier {bad} does not apply to {op}")
    if t.elem or t.frag:
        raise ValueError(f"{shown(t.text)}: unexpected qualifier for {op}")
    return form, {"satfinite": t.satfinite, "bitop": t.bitop}


def _suggest_variant(t: _Tokens) -> None:
    """Raise a clearer error when the text is valid under another sparsity variant."""
    for other in ("sp", "sp::ordered_metadata"):
        if t.sparse is None or other == t.sparse:
            continue
        try:
            _match_mma(
                dataclasses.replace(t, sparse=other, layouts=list(t.layouts), types=list(t.types))
            )
        except ValueError:
            continue
        want = "mma" + (f".{other}" if other else "")
        raise ValueError(f"{shown(t.text)}: this form exists only as {want}")


def _layouts_quals(t: _Tokens, form: Form, count: int, ctx: str) -> dict:
    if len(t.layouts) != count:
        raise ValueError(
            f"{shown(t.text)}: expected {count} layout qualifier(s) (.row/.col), "
            f"got {len(t.layouts)}"
        )
    pair = tuple(t.layouts) if count == 2 else (t.layouts[0], t.layouts[0])
    if pair not in form.layouts:
        allowed = {".".join(p) if count == 2 else p[0] for p in form.layouts}
        raise _fail("layout", ".".join(t.layouts), allowed, ctx)
    return {"alayout": pair[0], "blayout": pair[1]}


def _match_wmma_mem(t: _Tokens) -> tuple[Form, dict]:
    cands = [f for f in _spec.forms(t.opcode) if f.frag == t.frag]
    ctx = f"{t.opcode}.{t.frag}"
    cands = _narrow(cands, lambda f: f.shape == t.shape, "shape", t.shape, lambda f: f.shape, ctx)
    if len(t.types) != 1:
        raise ValueError(f"{shown(t.text)}: expected one element type, got {shown(t.types)}")
    (typ,) = t.types
    field = {"a": "atype", "b": "btype", "c": "ctype", "d": "dtype"}[t.frag]
    cands = _narrow(
        cands,
        lambda f: getattr(f, field) == typ,
        f".{field}",
        typ,
        lambda f: getattr(f, field),
        f"{ctx}.{t.shape}",
    )
    form = cands[0]
    quals = _layouts_quals(t, form, 1, f"{ctx}.{t.shape}.{typ}")
    for bad in ("satfinite", "rounding", "bitop", "kind", "num", "trans", "elem"):
        if getattr(t, bad):
            raise ValueError(f"{shown(t.text)}: qualifier {bad} does not apply to {t.opcode}")
    quals["layout"] = quals.pop("alayout")
    quals.pop("blayout")
    quals["ss"] = t.ss
    return form, quals


def _match_movement(t: _Tokens) -> tuple[Form, dict]:
    cands = _spec.forms(t.opcode)
    cands = _narrow(
        cands, lambda f: f.shape == t.shape, "shape", t.shape, lambda f: f.shape, t.opcode
    )
    ctx = f"{t.opcode}.{t.shape}"
    if t.opcode != "movmatrix":
        cands = _narrow(cands, lambda f: f.num == t.num, ".num", t.num, lambda f: f.num, ctx)
    elif t.num:
        raise ValueError(f"{shown(t.text)}: movmatrix takes no .num qualifier")
    cands = _narrow(cands, lambda f: f.elem == t.elem, ".type", t.elem, lambda f: f.elem, ctx)
    form = cands[0]
    if t.trans not in form.trans:
        raise ValueError(f"{shown(t.text)}: .trans is mandatory for {ctx}.{form.elem}")
    if t.opcode == "movmatrix" and t.ss:
        raise ValueError(f"{shown(t.text)}: movmatrix takes no state space")
    if t.ss == "global":
        raise _fail("state space", t.ss, ("shared", "shared::cta"), t.opcode)
    for bad in ("layouts", "types", "satfinite", "rounding", "bitop", "kind", "stype"):
        if getattr(t, bad):
            raise ValueError(f"{shown(t.text)}: qualifier {bad} does not apply to {t.opcode}")
    return form, {"trans": t.trans, "ss": t.ss}


# ------------------------------------------------------------------------------- tcgen05
#: ``.blockN`` aliases of ``.scale_vec::NX`` per kind (9.7.16.10.9.1)
BLOCK_ALIASES = {
    ("block32", "mxf8f6f4"): "1X",
    ("block32", "mxf4"): "2X",
    ("block32", "mxf4nvf4"): "2X",
    ("block16", "mxf4nvf4"): "4X",
}
TCGEN05_KINDS = ("f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4")


@functools.cache
def _tcgen05_index() -> dict:
    index: dict = {}
    for f in _spec.forms("tcgen05.mma"):
        index.setdefault((f.cta_group, f.kind), []).append(f)
    return index


def _tcgen05_slot(q: str) -> str:
    """What a ``tcgen05.mma`` qualifier sets (each is given at most once)."""
    if _SHAPE_RE.match(q):
        return "the shape"
    if q in SCALE_TYPES:
        return "the scale type"
    if q.startswith("scale_vec::") or q in ("block16", "block32"):
        return "the scale vector size"
    return q.split("::")[0] if "::" in q else f".{q}"


def _match_tcgen05(word: str) -> tuple[Form, dict]:
    """``tcgen05.mma{.sp}.cta_group::C.kind::K{.block_scale{.scale_vec}}`` followed by the
    fields of the instruction descriptor spelled out: ``.mMnNkK.dtype.atype.btype``, the
    scale type of block-scaled kinds, and optionally ``.satfinite`` (``.kind::i8``),
    ``.negate_a``, ``.negate_b``."""
    parts = word.split(".")
    if parts[:2] != ["tcgen05", "mma"]:
        raise _fail("opcode", word, _spec.OPCODES)
    rest = parts[2:]
    sparse = None
    if rest and rest[0] == "sp":  # tcgen05.mma.sp: structured sparse A (9.7.16.10.8)
        sparse, rest = "sp", rest[1:]
    if rest and rest[0] == "ws":
        raise ValueError(
            f"{word!r}: tcgen05.mma.ws is not emulated (docs/tcgen05.md: its arithmetic is "
            "that of tcgen05.mma; the forms that are emulated: tcgen05.mma, tcgen05.mma.sp)"
        )
    cta = kind = shape = stype = vec = None
    types: list[str] = []
    flags = {"block_scale": False, "satfinite": False, "negate_a": False, "negate_b": False}
    given: dict = {}

    def once(what: str, q: str) -> None:  # a qualifier of one kind given twice: refused
        if what in given:
            raise ValueError(
                f"{word!r}: {what} given twice (.{given[what]} and .{q}); give it once"
            )
        given[what] = q

    for q in rest:
        if q not in ELEMENT_TYPES or _SHAPE_RE.match(q):  # three element types, else once
            once(_tcgen05_slot(q), q)
        if q.startswith("cta_group::"):
            if q not in ("cta_group::1", "cta_group::2"):
                raise _fail(".cta_group", q, ("cta_group::1", "cta_group::2"), word)
            cta = int(q[-1])
        elif q.startswith("kind::"):
            kind = q[len("kind::") :]
            if kind not in TCGEN05_KINDS:
                raise _fail(".kind", q, [f"kind::{k}" for k in TCGEN05_KINDS], word)
        elif q.startswith("scale_vec::") or q in ("block16", "block32"):
            vec = q
        elif _SHAPE_RE.match(q):
            shape = q
        elif q in ELEMENT_TYPES:
            types.append(q)
        elif q in SCALE_TYPES:
            stype = q
        elif q in flags:
            flags[q] = True
        else:
            raise ValueError(f"unknown qualifier .{q} in {word!r}")
    if cta is None:
        raise ValueError(f"{word!r}: missing .cta_group; allowed: .cta_group::1, .cta_group::2")
    if kind is None:
        raise _fail(".kind", None, [f"kind::{k}" for k in TCGEN05_KINDS], word)
    scaled = kind.startswith("mx")
    if flags["block_scale"] != scaled:
        what = "requires" if scaled else "does not take"
        raise ValueError(f"{word!r}: .kind::{kind} {what} the .block_scale qualifier")
    if shape is None or len(types) != 3:
        raise ValueError(
            f"{word!r}: expected the instruction descriptor's fields after the qualifiers: "
            f".mMnNkK.dtype.atype.btype (e.g. "
            f"'tcgen05.mma.cta_group::1.kind::f16.m128n256k16.f32.bf16.bf16'), got "
            f"shape {shape!r} and types {types}"
        )
    ctx = f"tcgen05.mma{'.sp' if sparse else ''}.cta_group::{cta}.kind::{kind}"
    cands = [f for f in _tcgen05_index()[(cta, kind)] if f.sparse == sparse]
    d, a, b = types
    cands = _narrow(cands, lambda f: f.atype == a, "atype", a, lambda f: f.atype, ctx)
    cands = _narrow(cands, lambda f: f.btype == b, "btype", b, lambda f: f.btype, ctx)
    cands = _narrow(cands, lambda f: f.dtype == d, "dtype", d, lambda f: f.dtype, ctx)
    cands = _narrow(cands, lambda f: f.shape == shape, "shape", shape, lambda f: f.shape, ctx)
    quals = {"satfinite": flags["satfinite"], "negate_a": flags["negate_a"]}
    quals["negate_b"] = flags["negate_b"]
    if scaled:
        if vec is None:
            dflt = [f for f in cands if f.scale_vec_default]
            if not dflt:
                raise ValueError(
                    f"{word!r}: .kind::{kind} requires an explicit .scale_vec_size; "
                    "allowed: .block16, .block32, .scale_vec::2X, .scale_vec::4X"
                )
            cands = dflt
        else:
            nx = vec[len("scale_vec::") :] if vec.startswith("scale_vec::") else None
            nx = nx or BLOCK_ALIASES.get((vec, kind))
            allowed = {f".scale_vec::{f.scale_vec}" for f in cands}
            allowed |= {f".{blk}" for blk, k in BLOCK_ALIASES if k == kind}
            if nx is None or not any(f.scale_vec == nx for f in cands):
                raise _fail(".scale_vec_size", vec, allowed, ctx)
            cands = [f for f in cands if f.scale_vec == nx]
        cands = _narrow(
            cands,
            lambda f: f.stype == stype,
            "scale type",
            stype,
            lambda f: f.stype,
            f"{ctx}.scale_vec::{cands[0].scale_vec}",
        )
        quals["scale_vec"] = cands[0].scale_vec
    elif vec or stype:
        raise ValueError(f"{word!r}: a scale vector size or scale type needs .block_scale")
    if flags["satfinite"] and kind != "i8":
        raise ValueError(f"{word!r}: .satfinite (idesc saturate) applies to .kind::i8 only")
    if (flags["negate_a"] or flags["negate_b"]) and kind == "i8":
        raise ValueError(f"{word!r}: negate A/B (idesc bits 13-14) is 0 for .kind::i8")
    (form,) = cands
    return form, quals


# ------------------------------------------------------------------------------- operands
def _elem_bits(fmt: str, kind: str | None) -> int:
    if fmt in _spec.F8F6F4 and (fmt != "e2m1" or kind in ("f8f6f4", "mxf8f6f4")):
        return 8  # fp8, and fp6 / fp4 in their byte containers
    return {
        "f16": 16,
        "bf16": 16,
        "tf32": 32,
        "f32": 32,
        "f64": 64,
        "s32": 32,
        "s8": 8,
        "u8": 8,
        "s4": 4,
        "u4": 4,
        "b1": 1,
        "e2m1": 4,
    }[fmt]


def operands(form: Form) -> tuple[Operand, ...]:
    """The register operands of a form, in PTX operand order.

    ``wgmma.mma_async``: registers per thread of the warpgroup (128 threads): ``d`` (also
    the accumulator) and ``a`` for the form that takes A from registers (A may instead
    be a shared-memory descriptor; B always is one).
    """
    if form.opcode == "wgmma.mma_async":
        dbits = _elem_bits(form.dtype, None)
        abits = _elem_bits(form.atype, None)
        return (
            Operand("d", form.m * form.n * dbits // (128 * 32), 32, form.dtype, dbits, True),
            Operand("a", form.m * form.k * abits // (128 * 32), 32, form.atype, abits),
        )
    if form.opcode in ("mma", "wmma.mma"):
        reg = 64 if form.atype == "f64" else 32
        mats = 4 if (form.shape == "m8n8k4" and form.atype == "f16") else 1
        ka = form.k // 2 if form.sparse else form.k
        ab, bb = _elem_bits(form.atype, form.kind), _elem_bits(form.btype, form.kind)
        wmma_f16 = form.opcode == "wmma.mma" and form.atype == "f16"

        def count(rows, cols, bits, f16_fragment=False):
            if f16_fragment:  # "eight .f16x2 registers" for A or B of every wmma shape
                return 8
            return rows * cols * mats * bits // (32 * reg)

        ops = [
            Operand(
                "d",
                count(form.m, form.n, _elem_bits(form.dtype, None)),
                reg,
                form.dtype,
                _elem_bits(form.dtype, None),
                True,
            ),
            Operand("a", count(form.m, ka, ab, wmma_f16), reg, form.atype, ab),
            Operand("b", count(form.k, form.n, bb, wmma_f16), reg, form.btype, bb),
            Operand(
                "c",
                count(form.m, form.n, _elem_bits(form.ctype, None)),
                reg,
                form.ctype,
                _elem_bits(form.ctype, None),
            ),
        ]
        if form.sparse:
            ops.append(Operand("e", 1, 32, None, 4))
        if form.stype:
            ops += [
                Operand("scale_a", 1, 32, form.stype, 8),
                Operand("scale_b", 1, 32, form.stype, 8),
            ]
        return tuple(ops)
    if form.opcode in ("wmma.load", "wmma.store"):
        typ = form.atype or form.btype or form.ctype or form.dtype
        reg = 64 if typ == "f64" else 32
        rows, cols = {"a": (form.m, form.k), "b": (form.k, form.n)}.get(form.frag, (form.m, form.n))
        bits = _elem_bits(typ, None)
        f16_ab = typ == "f16" and form.frag in "ab"  # eight .f16x2 registers (9.7.14.4.1)
        op = Operand(
            "d" if form.opcode == "wmma.load" else "r",
            8 if f16_ab else rows * cols * bits // (32 * reg),
            reg,
            typ,
            bits,
            form.opcode == "wmma.load",
        )
        return (op,)
    if form.opcode == "movmatrix":
        return (Operand("d", 1, 32, None, 16, True), Operand("a", 1, 32, None, 16))
    n = int(form.num[1:])
    nregs = 2 * n if form.shape == "m16n16" else n
    bits = 16 if form.elem == "b16" else 8
    return (Operand("r", nregs, 32, None, bits, form.opcode == "ldmatrix"),)


# ------------------------------------------------------------------------------- parse
def parse(text: str, arch: str | None = None) -> tuple[Form, dict, Arch]:
    """Parse and validate; returns the form, its qualifier values and the architecture.

    Raises:
      TypeError: ``text`` is not a str, or ``arch`` neither None nor a str (checked before
        the cache, which would otherwise refuse a list as "unhashable").
      ValueError: see :func:`jaxmma.instruction`.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str (PTX instruction text), got {type(text).__name__}")
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch: expected None or a str such as 'sm_90', got {type(arch).__name__}")
    return _parse(text, arch)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, arch: str | None) -> tuple[Form, dict, Arch]:
    word = _strip(text)
    if word.startswith("tcgen05"):
        form, quals = _match_tcgen05(word)
        a = default_arch(form) if arch is None else parse_arch(arch)
        _check_arch(form, a, word)
        return form, quals, a
    t = _tokenize(text)
    if t.opcode in ("mma", "wmma.mma"):
        try:
            form, quals = _match_mma(t)
        except ValueError:
            if t.opcode == "mma":
                _suggest_variant(t)
            raise
        if t.opcode == "wmma.mma" and quals.get("scale_vec"):
            raise ValueError("wmma.mma has no block scaling")
    elif t.opcode in ("wmma.load", "wmma.store"):
        form, quals = _match_wmma_mem(t)
    elif t.opcode == "wgmma.mma_async":
        form, quals = _match_wgmma(t)
    else:
        form, quals = _match_movement(t)
    a = default_arch(form) if arch is None else parse_arch(arch)
    _check_arch(form, a, t.text)
    return form, quals, a


def canonical_text(form: Form, quals: dict) -> str:
    """The instruction text in the spec's qualifier order."""
    f, q = form, quals
    if f.opcode == "tcgen05.mma":
        parts = ["tcgen05", "mma"] + (["sp"] if f.sparse else [])
        parts += [f"cta_group::{f.cta_group}", f"kind::{f.kind}"]
        if f.stype:
            parts += ["block_scale", f"scale_vec::{f.scale_vec}"]
        parts += [f.shape, f.dtype, f.atype, f.btype]
        parts += [f.stype] if f.stype else []
        parts += [x for x in ("satfinite", "negate_a", "negate_b") if q.get(x)]
        return ".".join(parts)
    if f.opcode in ("mma", "wmma.mma"):
        parts = ["mma" if f.opcode == "mma" else "wmma.mma"]
        if f.sparse:
            parts.append(f.sparse)
        if f.opcode == "wmma.mma" and q.get("bitop"):
            parts += [q["bitop"], "popc"]
        parts += ["sync", "aligned"]
        if f.opcode == "mma":
            parts += [f.shape, q["alayout"], q["blayout"]]
        else:
            parts += [q["alayout"], q["blayout"], f.shape]
        if q.get("rounding") and q["rounding"] != "rn":
            parts.append(q["rounding"])
        if f.kind:
            parts.append(f"kind::{f.kind}")
        if f.stype:
            parts += ["block_scale", f"scale_vec::{f.scale_vec}"]
        if q.get("satfinite") and f.opcode == "mma":
            parts.append("satfinite")
        if f.opcode == "wmma.mma" and f.atype == "f16":
            parts += [f.dtype, f.ctype]
        else:
            parts += [f.dtype, f.atype, f.btype, f.ctype]
        if q.get("satfinite") and f.opcode == "wmma.mma":
            parts.append("satfinite")
        if f.stype:
            parts.append(f.stype)
        if f.opcode == "mma" and q.get("bitop"):
            parts += [q["bitop"], "popc"]
        return ".".join(parts)
    if f.opcode == "wgmma.mma_async":
        # .satfinite after the types, as the spec's examples and CUTLASS write it
        parts = [f.opcode, "sync", "aligned", f.shape, f.dtype, f.atype, f.btype]
        if q.get("satfinite"):
            parts.append("satfinite")
        if q.get("bitop"):
            parts += [q["bitop"], "popc"]
        return ".".join(parts)
    if f.opcode in ("wmma.load", "wmma.store"):
        typ = f.atype or f.btype or f.ctype or f.dtype
        parts = [f.opcode, f.frag, "sync", "aligned", q["layout"], f.shape]
        if q.get("ss"):
            parts.append(q["ss"])
        return ".".join(parts + [typ])
    parts = [f.opcode, "sync", "aligned", f.shape]
    if f.num:
        parts.append(f.num)
    if q.get("trans"):
        parts.append("trans")
    if q.get("ss"):
        parts.append(q["ss"])
    return ".".join(parts + [f.elem])
