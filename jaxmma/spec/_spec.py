"""The one table of every instruction form of PTX ISA sections 9.7.14 and 9.7.15.

Every other module (the parser, the emulators, the conformance harness, the tests, the
benchmarks and the docs) reads the forms from :data:`FORMS`; nothing else lists them.

A :class:`Form` fixes the opcode, shape and element types of one form. Qualifiers that do
not change operand shapes (layouts, ``.satfinite``, ``.rnd``, ``.num``-independent state
spaces, b1 operations) are stored as the set of values the form allows. The table follows
the spec's syntax blocks and target notes; where the spec text and ``ptxas`` disagree (the
cases are listed in ``SPEC_ERRATA`` and pinned by tests), the table follows ``ptxas``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple


class Target(NamedTuple):
    """Which architectures run a form.

    ``min_sm``: the lowest compute capability (70, 75, ...) that runs it. ``family``: when
    not empty, the form needs an architecture-specific target (``sm_90a``, ``sm_120a``,
    ...) whose number is in this set (``sm_XXXf`` family targets are accepted too).
    """

    min_sm: int
    family: frozenset[int] = frozenset()


ANY = frozenset()
SM80 = Target(80)
SM100_FAMILY = frozenset({100, 101, 103, 110, 120, 121})  # .a targets named by the spec
SM120_FAMILY = frozenset({120, 121})


@dataclasses.dataclass(frozen=True)
class Form:
    """One instruction form of the spec (see the module docstring)."""

    opcode: str  # mma | wmma.* | ldmatrix | stmatrix | movmatrix | wgmma.mma_async | tcgen05.mma
    shape: str  # m16n8k16, m8n8, ...
    atype: str | None = None
    btype: str | None = None
    ctype: str | None = None
    dtype: str | None = None
    sparse: str | None = None  # None | "sp" | "sp::ordered_metadata"
    kind: str | None = None  # f8f6f4 | mxf8f6f4 | mxf4 | mxf4nvf4
    scale_vec: str | None = None  # 1X | 2X | 4X (block scale)
    scale_vec_default: bool = False  # may .scale_vec_size be omitted
    stype: str | None = None  # ue8m0 | ue4m3
    layouts: tuple[tuple[str, str], ...] = (("row", "col"),)  # allowed (alayout, blayout)
    satfinite: bool = False  # is .satfinite allowed
    rounding: tuple[str, ...] = ()  # allowed .rnd values (f64)
    bitops: tuple[str, ...] = ()  # allowed b1 operations
    frag: str | None = None  # wmma.load/store: a | b | c | d
    num: str | None = None  # ldmatrix/stmatrix: x1 | x2 | x4
    trans: tuple[bool, ...] = (False,)  # allowed .trans for movement
    elem: str | None = None  # movement element type: b16 | b8 | b8x16.b6x16_p32 | ...
    ptx: tuple[int, int] = (6, 0)
    target: Target = Target(70)
    cta_group: int | None = None  # tcgen05.mma: 1 or 2 (CTAs whose Tensor Memory holds D)

    @property
    def m(self) -> int:
        return int(self.shape[1:].split("n")[0])

    @property
    def n(self) -> int:
        return int(self.shape.split("n")[1].split("k")[0])

    @property
    def k(self) -> int | None:
        return int(self.shape.split("k")[1]) if "k" in self.shape else None

    @property
    def variants(self) -> int:
        """How many distinct instruction texts this form stands for."""
        count = len(self.layouts) * max(len(self.rounding), 1) * max(len(self.bitops), 1)
        count *= 2 if self.satfinite else 1
        return count * len(self.trans)


# ---------------------------------------------------------------------------------------
# mma (9.7.14.5.14)
ALL_LAYOUTS = tuple(itertools.product(("row", "col"), ("row", "col")))
F8 = ("e4m3", "e5m2")
F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")
I8 = ("u8", "s8")
I4 = ("u4", "s4")
RND = ("rn", "rz", "rm", "rp")


def _mma_dense() -> list[Form]:
    forms = []
    add = forms.append
    # .f16: m8n8k4 needs dtype .f32 with ctype .f32 (the text); ptxas also requires
    # dtype == ctype for m16n8k8 (the text) and for m16n8k16 (not in the text).
    for d, c in (("f16", "f16"), ("f32", "f16"), ("f32", "f32")):
        add(
            Form(
                "mma",
                "m8n8k4",
                "f16",
                "f16",
                c,
                d,
                layouts=ALL_LAYOUTS,
                ptx=(6, 4),
                target=Target(70),
            )
        )
    for d in ("f16", "f32"):
        add(Form("mma", "m16n8k8", "f16", "f16", d, d, ptx=(6, 5), target=Target(75)))
        add(Form("mma", "m16n8k16", "f16", "f16", d, d, ptx=(7, 0), target=Target(80)))
    for shape in ("m16n8k8", "m16n8k16"):
        add(Form("mma", shape, "bf16", "bf16", "f32", "f32", ptx=(7, 0), target=Target(80)))
    for shape in ("m16n8k4", "m16n8k8"):
        add(Form("mma", shape, "tf32", "tf32", "f32", "f32", ptx=(7, 0), target=Target(80)))
    # fp8 (sm_89): dtype == ctype (ptxas); k16 and f16 accumulators from PTX 8.7.
    for shape, a, b, d in itertools.product(("m16n8k16", "m16n8k32"), F8, F8, ("f16", "f32")):
        ptx = (8, 4) if (shape == "m16n8k32" and d == "f32") else (8, 7)
        add(Form("mma", shape, a, b, d, d, ptx=ptx, target=Target(89)))
    for a, b, d in itertools.product(F8F6F4, F8F6F4, ("f16", "f32")):
        add(
            Form(
                "mma",
                "m16n8k32",
                a,
                b,
                d,
                d,
                kind="f8f6f4",
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    # block scaling (9.7.14.3, Table 36)
    for a, b in itertools.product(F8F6F4, F8F6F4):
        add(
            Form(
                "mma",
                "m16n8k32",
                a,
                b,
                "f32",
                "f32",
                kind="mxf8f6f4",
                scale_vec="1X",
                scale_vec_default=True,
                stype="ue8m0",
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    add(
        Form(
            "mma",
            "m16n8k64",
            "e2m1",
            "e2m1",
            "f32",
            "f32",
            kind="mxf4",
            scale_vec="2X",
            scale_vec_default=True,
            stype="ue8m0",
            ptx=(8, 7),
            target=Target(120, SM120_FAMILY),
        )
    )
    for sv, st in (("2X", "ue8m0"), ("4X", "ue4m3")):
        add(
            Form(
                "mma",
                "m16n8k64",
                "e2m1",
                "e2m1",
                "f32",
                "f32",
                kind="mxf4nvf4",
                scale_vec=sv,
                stype=st,
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    # .f64: the rounding modifiers of the precision text are accepted by ptxas.
    add(
        Form(
            "mma", "m8n8k4", "f64", "f64", "f64", "f64", rounding=RND, ptx=(7, 0), target=Target(80)
        )
    )
    for shape in ("m16n8k4", "m16n8k8", "m16n8k16"):
        add(
            Form(
                "mma",
                shape,
                "f64",
                "f64",
                "f64",
                "f64",
                rounding=RND,
                ptx=(7, 8),
                target=Target(90),
            )
        )
    # integers, any signedness mix (ptxas accepts mixed .s4/.u4 as well)
    for (shape, ptx, sm), a, b in itertools.product(
        (("m8n8k16", (6, 5), 75), ("m16n8k16", (7, 0), 80), ("m16n8k32", (7, 0), 80)), I8, I8
    ):
        add(Form("mma", shape, a, b, "s32", "s32", satfinite=True, ptx=ptx, target=Target(sm)))
    for (shape, ptx, sm), a, b in itertools.product(
        (("m8n8k32", (6, 5), 75), ("m16n8k32", (7, 0), 80), ("m16n8k64", (7, 0), 80)), I4, I4
    ):
        add(Form("mma", shape, a, b, "s32", "s32", satfinite=True, ptx=ptx, target=Target(sm)))
    # .b1: .xor from PTX 7.0; .and from 7.1 and sm_80 (kept as separate forms: they differ
    # in their requirements).
    for shape, sm in (("m8n8k128", 75), ("m16n8k128", 80), ("m16n8k256", 80)):
        add(
            Form(
                "mma",
                shape,
                "b1",
                "b1",
                "s32",
                "s32",
                bitops=("xor",),
                ptx=(7, 0),
                target=Target(sm),
            )
        )
        add(
            Form(
                "mma",
                shape,
                "b1",
                "b1",
                "s32",
                "s32",
                bitops=("and",),
                ptx=(7, 1),
                target=Target(80),
            )
        )
    return forms


def _mma_sparse() -> list[Form]:
    forms = []
    for variant in ("sp", "sp::ordered_metadata"):
        base = (7, 1) if variant == "sp" else (8, 5)

        def add(*args, ptx=base, target=SM80, variant=variant, **kw):
            forms.append(Form("mma", *args, sparse=variant, ptx=ptx, target=target, **kw))

        for shape, d in itertools.product(("m16n8k16", "m16n8k32"), ("f16", "f32")):
            add(shape, "f16", "f16", d, d)  # dtype == ctype for these shapes
        for shape in ("m16n8k16", "m16n8k32"):
            add(shape, "bf16", "bf16", "f32", "f32")
        for shape in ("m16n8k8", "m16n8k16"):
            add(shape, "tf32", "tf32", "f32", "f32")
        for shape, a, b in itertools.product(("m16n8k32", "m16n8k64"), I8, I8):
            add(shape, a, b, "s32", "s32", satfinite=True)
        for shape, a, b in itertools.product(("m16n8k64", "m16n8k128"), I4, I4):
            add(shape, a, b, "s32", "s32", satfinite=True)
        for a, b in itertools.product(F8, F8):
            add("m16n8k64", a, b, "f32", "f32", ptx=max(base, (8, 4)), target=Target(89))
    om = "sp::ordered_metadata"
    for a, b, d in itertools.product(F8F6F4, F8F6F4, ("f16", "f32")):
        forms.append(
            Form(
                "mma",
                "m16n8k64",
                a,
                b,
                d,
                d,
                sparse=om,
                kind="f8f6f4",
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    for a, b in itertools.product(F8F6F4, F8F6F4):
        forms.append(
            Form(
                "mma",
                "m16n8k64",
                a,
                b,
                "f32",
                "f32",
                sparse=om,
                kind="mxf8f6f4",
                scale_vec="1X",
                scale_vec_default=True,
                stype="ue8m0",
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    forms.append(
        Form(
            "mma",
            "m16n8k128",
            "e2m1",
            "e2m1",
            "f32",
            "f32",
            sparse=om,
            kind="mxf4",
            scale_vec="2X",
            scale_vec_default=True,
            stype="ue8m0",
            ptx=(8, 7),
            target=Target(120, SM120_FAMILY),
        )
    )
    for sv, st in (("2X", "ue8m0"), ("4X", "ue4m3")):
        forms.append(
            Form(
                "mma",
                "m16n8k128",
                "e2m1",
                "e2m1",
                "f32",
                "f32",
                sparse=om,
                kind="mxf4nvf4",
                scale_vec=sv,
                stype=st,
                ptx=(8, 7),
                target=Target(120, SM120_FAMILY),
            )
        )
    return forms


# ---------------------------------------------------------------------------------------
# wmma (9.7.14.4)
WMMA_SHAPES_16 = ("m16n16k16", "m8n32k16", "m32n8k16")


def _wmma() -> list[Form]:
    forms = []
    add = forms.append
    # (shape, atype, btype, ctypes, ptx, sm)
    groups = [(s, "f16", ("f16", "f32"), (6, 0), 70) for s in WMMA_SHAPES_16]
    groups += [(s, "bf16", ("f32",), (7, 0), 80) for s in WMMA_SHAPES_16]
    groups += [("m16n16k8", "tf32", ("f32",), (7, 0), 80)]
    groups += [(s, t, ("s32",), (6, 3), 72) for s in WMMA_SHAPES_16 for t in I8]
    groups += [("m8n8k32", t, ("s32",), (6, 3), 75) for t in I4]
    groups += [("m8n8k128", "b1", ("s32",), (6, 3), 75)]
    groups += [("m8n8k4", "f64", ("f64",), (7, 0), 80)]
    seen = set()
    for shape, t, ctypes, ptx, sm in groups:
        sub = t in I4 or t == "b1"
        lay = ("row", "col")
        add(
            Form(
                "wmma.load",
                shape,
                atype=t,
                frag="a",
                ptx=ptx,
                target=Target(sm),
                layouts=(("row", "row"),) if sub else tuple((x, x) for x in lay),
            )
        )
        add(
            Form(
                "wmma.load",
                shape,
                btype=t,
                frag="b",
                ptx=ptx,
                target=Target(sm),
                layouts=(("col", "col"),) if sub else tuple((x, x) for x in lay),
            )
        )
        for c in ctypes:  # accumulator loads/stores: one form per (shape, type)
            if (shape, c) in seen:
                continue
            seen.add((shape, c))
            add(
                Form(
                    "wmma.load",
                    shape,
                    ctype=c,
                    frag="c",
                    ptx=ptx,
                    target=Target(sm),
                    layouts=tuple((x, x) for x in lay),
                )
            )
            add(
                Form(
                    "wmma.store",
                    shape,
                    dtype=c,
                    frag="d",
                    ptx=ptx,
                    target=Target(sm),
                    layouts=tuple((x, x) for x in lay),
                )
            )
        # wmma.mma
        if t == "f16":
            for d, c in itertools.product(("f16", "f32"), repeat=2):
                add(
                    Form(
                        "wmma.mma",
                        shape,
                        "f16",
                        "f16",
                        c,
                        d,
                        layouts=ALL_LAYOUTS,
                        ptx=ptx,
                        target=Target(sm),
                    )
                )
        elif t in ("bf16", "tf32"):
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "f32",
                    "f32",
                    layouts=ALL_LAYOUTS,
                    ptx=ptx,
                    target=Target(sm),
                )
            )
        elif t in I8:
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "s32",
                    "s32",
                    layouts=ALL_LAYOUTS,
                    satfinite=True,
                    ptx=ptx,
                    target=Target(sm),
                )
            )
        elif t in I4:
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "s32",
                    "s32",
                    satfinite=True,
                    ptx=ptx,
                    target=Target(sm),
                )
            )
        elif t == "b1":
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "s32",
                    "s32",
                    bitops=("xor",),
                    ptx=ptx,
                    target=Target(sm),
                )
            )
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "s32",
                    "s32",
                    bitops=("and",),
                    ptx=(7, 1),
                    target=Target(80),
                )
            )
        elif t == "f64":
            add(
                Form(
                    "wmma.mma",
                    shape,
                    t,
                    t,
                    "f64",
                    "f64",
                    layouts=ALL_LAYOUTS,
                    rounding=RND,
                    ptx=ptx,
                    target=Target(sm),
                )
            )
    return forms


# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix / movmatrix (9.7.14.5.15-17)
def _movement() -> list[Form]:
    forms = []
    for num in ("x1", "x2", "x4"):
        forms.append(
            Form(
                "ldmatrix",
                "m8n8",
                num=num,
                elem="b16",
                trans=(False, True),
                ptx=(6, 5),
                target=Target(75),
            )
        )
        forms.append(
            Form(
                "stmatrix",
                "m8n8",
                num=num,
                elem="b16",
                trans=(False, True),
                ptx=(7, 8),
                target=Target(90),
            )
        )
        forms.append(
            Form(
                "stmatrix",
                "m16n8",
                num=num,
                elem="b8",
                trans=(True,),
                ptx=(8, 6),
                target=Target(100, SM100_FAMILY),
            )
        )
        forms.append(
            Form(
                "ldmatrix",
                "m8n16",
                num=num,
                elem="b8x16.b6x16_p32",
                ptx=(8, 6),
                target=Target(100, SM100_FAMILY),
            )
        )
        forms.append(
            Form(
                "ldmatrix",
                "m8n16",
                num=num,
                elem="b8x16.b4x16_p64",
                ptx=(8, 6),
                target=Target(100, SM100_FAMILY),
            )
        )
    for num in ("x1", "x2"):
        for elem in ("b8", "b8x16.b6x16_p32", "b8x16.b4x16_p64"):
            forms.append(
                Form(
                    "ldmatrix",
                    "m16n16",
                    num=num,
                    elem=elem,
                    trans=(True,),
                    ptx=(8, 6),
                    target=Target(100, SM100_FAMILY),
                )
            )
    forms.append(
        Form("movmatrix", "m8n8", elem="b16", trans=(True,), ptx=(7, 8), target=Target(75))
    )
    return forms


# ---------------------------------------------------------------------------------------
# wgmma.mma_async (9.7.15.5.2): warpgroup-level, dense, sm_90a only. The text has no
# layouts (A is row-major, B column-major); transposes, scale-d and the negating
# imm-scale-a/b are operands, not qualifiers. dtype is also the accumulator type.
SM90A = Target(90, frozenset({90}))
WGMMA_N = tuple(range(8, 257, 8))  # floating forms: N = 8, 16, ..., 256
WGMMA_N_INT = (8, 16, 24, 32, *range(48, 225, 16))  # .s8/.u8: ..., 32, 48, 64, ..., 224
WGMMA_N_B1 = (8, 16, 24, 32, *range(48, 257, 16))  # .b1: ..., 32, 48, 64, ..., 256


def _wgmma() -> list[Form]:
    forms = []

    def add(n, k, a, b, d, **kw):
        kw.setdefault("ptx", (8, 0))
        forms.append(Form("wgmma.mma_async", f"m64n{n}k{k}", a, b, d, d, target=SM90A, **kw))

    for n in WGMMA_N:
        for d in ("f16", "f32"):
            add(n, 16, "f16", "f16", d)
        add(n, 16, "bf16", "bf16", "f32")
        add(n, 8, "tf32", "tf32", "f32")
        for a, b, d in itertools.product(F8, F8, ("f16", "f32")):
            add(n, 32, a, b, d)
    for n, a, b in itertools.product(WGMMA_N_INT, I8, I8):
        add(n, 32, a, b, "s32", satfinite=True, ptx=(8, 0) if a == b else (8, 4))
    for n in WGMMA_N_B1:
        add(n, 256, "b1", "b1", "s32", bitops=("and",))
    return forms


FORMS: tuple[Form, ...] = tuple(_mma_dense() + _mma_sparse() + _wmma() + _movement() + _wgmma())


# ---------------------------------------------------------------------------------------
# tcgen05.mma (PTX ISA 9.7.16.10): the 5th-generation tensor core of sm_100a/sm_101a/
# sm_103a/sm_110a, issued by one thread. The text names .cta_group, .kind and the block
# scaling; M, N, the element types and saturation are fields of the instruction
# descriptor (idesc, 9.7.16.4.2). One row per (cta_group, kind, M, N, types) of the
# shape table (9.7.16.2.1), dense A and sparse A (tcgen05.mma.sp, 9.7.16.10.8: K twice
# the dense K, A stored M x K/2). Kept apart from FORMS (the warp and warpgroup
# forms of 9.7.14-15): forms("tcgen05.mma") returns them.
TCGEN05_TARGET = Target(100, frozenset({100, 101, 103, 110}))
TCGEN05_TARGET_I8 = Target(100, frozenset({100, 101, 110}))  # .kind::i8: no sm_103a
TCGEN05_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64}
TCGEN05_K["mxf4nvf4"] = 64
N8 = tuple(range(8, 257, 8))
N16 = tuple(range(16, 257, 16))
N_I8 = (8, 16, 24, 32, *range(48, 257, 16))
N32 = tuple(range(32, 257, 32))


def tcgen05_shapes(kind: str, cta_group: int, sparse: bool = False) -> tuple[tuple[int, int], ...]:
    """The (M, N) pairs of the shape table (9.7.16.2.1) for a ``tcgen05.mma`` of this kind
    (``sparse``: ``tcgen05.mma.sp``, whose block-scaled kinds take only M = 256 with
    ``.cta_group::2``)."""
    scaled = kind.startswith("mx")
    if cta_group == 1:
        ms = (128,) if scaled else (64, 128)
        ns = N_I8 if kind == "i8" else N8
    else:
        ms = (256,) if scaled and sparse else (128, 256)
        ns = N32 if kind == "i8" else N16
    return tuple((m, n) for m in ms for n in ns)


def _tcgen05() -> list[Form]:
    forms = []
    # (kind, dtype, atype, btype, scale_vec, stype, ptx)
    types = [("f16", "f16", "f16", "f16"), ("f16", "f32", "f16", "f16")]
    types += [("f16", "f32", "bf16", "bf16"), ("tf32", "f32", "tf32", "tf32")]
    types += [("f8f6f4", d, a, b) for d, a, b in itertools.product(("f16", "f32"), F8F6F4, F8F6F4)]
    types += [("i8", "s32", a, b) for a, b in itertools.product(I8, I8)]
    rows = [(*t, None, None, (8, 6)) for t in types]
    rows += [
        ("mxf8f6f4", "f32", a, b, "1X", "ue8m0", (8, 6))
        for a, b in itertools.product(F8F6F4, F8F6F4)
    ]
    rows += [("mxf4", "f32", "e2m1", "e2m1", "2X", "ue8m0", (8, 6))]
    rows += [
        ("mxf4nvf4", "f32", "e2m1", "e2m1", sv, st, (8, 7))
        for sv, st in (("2X", "ue8m0"), ("4X", "ue8m0"), ("4X", "ue4m3"))
    ]
    for (kind, d, a, b, sv, st, ptx), sp in itertools.product(rows, (False, True)):
        k = TCGEN05_K[kind] * (2 if sp else 1)  # tcgen05.mma.sp: K doubles (A is M x K/2)
        target = TCGEN05_TARGET_I8 if kind == "i8" else TCGEN05_TARGET
        for cta in (1, 2):
            for m, n in tcgen05_shapes(kind, cta, sp):
                forms.append(
                    Form(
                        "tcgen05.mma",
                        f"m{m}n{n}k{k}",
                        a,
                        b,
                        d,
                        d,
                        sparse="sp" if sp else None,
                        kind=kind,
                        scale_vec=sv,
                        scale_vec_default=kind in ("mxf8f6f4", "mxf4"),
                        stype=st,
                        satfinite=kind == "i8",
                        ptx=ptx,
                        target=target,
                        cta_group=cta,
                    )
                )
    return forms


TCGEN05_FORMS: tuple[Form, ...] = tuple(_tcgen05())

#: Places where the spec's text or examples disagree with ptxas (CUDA 13.0); the table
#: follows ptxas. Each case is pinned by a test.
SPEC_ERRATA = {
    "wmma f64 accumulator": "the fragment table says one .f64 register for C/D of m8n8k4; "
    "ptxas requires two (8x8 elements over 32 lanes)",
    "stmatrix m16n8 without .trans": "the examples store 'stmatrix.sync.aligned.m16n8.x4.b8' "
    "without .trans; the text (and ptxas) make .trans mandatory for m16n8",
    "mma f64 .rnd": "the mma syntax block shows no rounding modifier for .f64, the precision "
    "text lists .rn/.rz/.rm/.rp; ptxas accepts them",
    "mma .f16 m16n8k16 dtype": "the syntax allows any dtype/ctype pair; ptxas requires "
    "dtype == ctype for m16n8k16 (the text states it for m16n8k8 only)",
    "mma fp8 dtype": "the syntax allows any dtype/ctype pair for .e4m3/.e5m2 and "
    "kind::f8f6f4; ptxas requires dtype == ctype",
    "mma.sp fp8 f16 accumulators": "a target note mentions .f16 dtype/ctype for sparse "
    ".e4m3/.e5m2; no syntax block has it and ptxas refuses it on every target",
    "mma.m8n84": "the f64 syntax block spells the shape '.m8n84'; the shape is .m8n8k4",
}

# Accessors --------------------------------------------------------------------------------
OPCODES = (
    "mma",
    "wmma.load",
    "wmma.store",
    "wmma.mma",
    "ldmatrix",
    "stmatrix",
    "movmatrix",
    "wgmma.mma_async",
    "tcgen05.mma",
)


def forms(opcode: str | None = None) -> tuple[Form, ...]:
    """All forms of sections 9.7.14-15, or those of one opcode (``"tcgen05.mma"``: the
    :data:`TCGEN05_FORMS`)."""
    if opcode == "tcgen05.mma":
        return TCGEN05_FORMS
    return FORMS if opcode is None else tuple(f for f in FORMS if f.opcode == opcode)


def count_variants(opcode: str | None = None) -> int:
    """How many distinct instruction texts the table stands for (state spaces not counted)."""
    return sum(f.variants for f in forms(opcode))
