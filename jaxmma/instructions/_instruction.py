"""The :class:`Instruction` object returned by :func:`jaxmma.instruction`."""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import spec
from ..operands import fragment_matrix
from ..operands import unfragment as _unfragment
from ..spec import Form
from . import _dispatch, _mma, _movement, _tcgen05, _wgmma, _wmma

if TYPE_CHECKING:
    import jax
    from jax.typing import ArrayLike

    from ..operands import Quantized

# opcode -> module that implements it
_IMPLEMENTATIONS = {
    "mma": _mma,
    "wmma.mma": _wmma,
    "wmma.load": _wmma,
    "wmma.store": _wmma,
    "ldmatrix": _movement,
    "stmatrix": _movement,
    "movmatrix": _movement,
    "wgmma.mma_async": _wgmma,
    "tcgen05.mma": _tcgen05,
}


#: opcodes whose register level is a product (compiled once per configuration)
_PRODUCTS = ("mma", "wmma.mma")


def _impl(opcode: str) -> Any:
    return _IMPLEMENTATIONS[opcode]


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One PTX warp-level matrix instruction, parsed and validated.

    Immutable and hashable, so it can be a static argument of ``jax.jit``. Calling it runs
    the emulation at register level (see README.md and docs/internals.md): ``ins(a, b,
    c)`` for ``mma``, ``ins(a, b, c, e, selector=f)`` for ``mma.sp`` (``check=True`` to
    refuse undefined-behaviour metadata), block-scale keyword arguments for
    ``.block_scale`` forms, ``ins(smem, addrs)`` for ``ldmatrix`` and so on (memory
    instructions take ``check=True`` too, see :mod:`jaxmma._memory`).

    Attributes:
      text: canonical instruction text (spec qualifier order, no operands).
      form: the row of the spec table (:class:`jaxmma._spec.Form`).
      arch: the architecture whose numerics are emulated (``"sm_90"``, ``"sm_120a"``, ...).
      alayout, blayout, satfinite, rounding, bitop, scale_vec, trans, layout, ss: qualifier
        values (None where they do not apply).
    """

    form: Form
    arch: str
    alayout: str | None = None
    blayout: str | None = None
    layout: str | None = None
    satfinite: bool = False
    rounding: str | None = None
    bitop: str | None = None
    scale_vec: str | None = None
    trans: bool = False
    ss: str | None = None
    negate_a: bool = False  # tcgen05.mma: idesc bits 13 / 14
    negate_b: bool = False

    # -- descriptive properties ------------------------------------------------------
    @property
    def text(self) -> str:
        return spec.canonical_text(self.form, dataclasses.asdict(self))

    @property
    def opcode(self) -> str:
        return self.form.opcode

    @property
    def shape(self) -> str:
        return self.form.shape

    @property
    def m(self) -> int:
        return self.form.m

    @property
    def n(self) -> int:
        return self.form.n

    @property
    def k(self) -> int | None:
        return self.form.k

    @property
    def atype(self) -> str | None:
        return self.form.atype

    @property
    def btype(self) -> str | None:
        return self.form.btype

    @property
    def ctype(self) -> str | None:
        return self.form.ctype

    @property
    def dtype(self) -> str | None:
        return self.form.dtype

    @property
    def kind(self) -> str | None:
        return self.form.kind

    @property
    def stype(self) -> str | None:
        return self.form.stype

    @property
    def sparse(self) -> str | None:
        return self.form.sparse

    @property
    def cta_group(self) -> int | None:
        return self.form.cta_group

    @property
    def idesc(self) -> int:
        """``tcgen05.mma``: the 32-bit instruction descriptor of this form (no transposes,
        scale factor IDs 0); see :func:`tcgen05_instruction` for the reverse."""
        if self.opcode != "tcgen05.mma":
            raise ValueError(
                f"idesc: only tcgen05.mma has an instruction descriptor, not {self.text}"
            )
        # every tcgen05.mma form names its kind and its D, A and B types
        return spec.idesc_encode(
            cast(str, self.kind),
            m=self.m,
            n=self.n,
            dtype=cast(str, self.dtype),
            atype=cast(str, self.atype),
            btype=cast(str, self.btype),
            stype=self.stype,
            satfinite=self.satfinite,
            negate_a=self.negate_a,
            negate_b=self.negate_b,
            sparse=self.sparse is not None,
        )

    @property
    def arch_number(self) -> int:
        return spec.parse_arch(self.arch).number

    @property
    def operands(self) -> tuple[spec.Operand, ...]:
        """Register operands in PTX operand order (see :class:`jaxmma._ptx.Operand`)."""
        return spec.operands(self.form)

    @property
    def nregs(self) -> dict[str, int]:
        """Registers per lane of each register operand, e.g. ``{'d': 4, 'a': 4, ...}``."""
        return {op.name: op.nregs for op in self.operands}

    @property
    def ptx_version(self) -> str:
        return "{}.{}".format(*self.form.ptx)

    @property
    def targets(self) -> str:
        """The spec's target requirement in words, e.g. ``'sm_80 or newer'``."""
        t = self.form.target
        if t.family:
            return " or ".join(f"sm_{n}a" for n in sorted(t.family))
        return f"sm_{t.min_sm} or newer"

    def runs_on(self, arch: str) -> bool:
        """Whether a GPU of ``arch`` runs this form (per the spec's target notes)."""
        return spec.runs_on(self.form, spec.parse_arch(arch))

    def __repr__(self) -> str:
        return f"jaxmma.instruction({self.text!r}, arch={self.arch!r})"

    # -- emulation -------------------------------------------------------------------
    def _implementation(self) -> Any:
        return _impl(self.opcode)

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        if self.opcode in _PRODUCTS:  # compiled once per configuration (see _dispatch)
            return _dispatch.call(self, "execute", args, kwargs)
        return _impl(self.opcode).execute(self, *args, **kwargs)

    def mma(
        self, A: ArrayLike | Quantized, B: ArrayLike | Quantized, C: ArrayLike, **kwargs: Any
    ) -> jax.Array:
        """Matrix level: ``D = A @ B + C`` with this instruction's exact arithmetic.

        Args:
          A: ``[..., M, K]``, B: ``[..., K, N]``, C: ``[..., M, N]`` arrays of element
            values in the instruction's element dtypes (e.g. ``jnp.bfloat16``), or raw bits
            as unsigned integers.
        Returns:
          D ``[..., M, N]`` in the destination dtype, the same bits as the register level.
        """
        return _dispatch.call(self, "matrix_mma", (A, B, C), kwargs)

    def fragment(self, operand: str, matrix: ArrayLike) -> jax.Array:
        """Gather a matrix ``[..., rows, cols]`` into registers ``[..., 32, nregs]``.

        ``matrix`` holds the operand's elements in its element dtype (``jnp.bfloat16``,
        ``jnp.float8_e4m3fn``, ...; bit-cast, never value-converted) or as unsigned raw bits
        at least as wide as the element (``uint16`` or ``uint32`` for ``.bf16``; ``uint8``
        for ``kind::f8f6f4`` containers). Concrete raw bits above the element's width are
        a ``ValueError``; traced ones (under ``jit``) cannot be inspected and have those
        bits dropped. Any other dtype is a ``TypeError`` (values are never converted).
        """
        return fragment_matrix(self, operand, matrix)

    def unfragment(self, operand: str, regs: ArrayLike) -> jax.Array:
        """Scatter registers ``[..., 32, nregs]`` back into the matrix ``[..., rows, cols]``."""
        return _unfragment(self, operand, regs)


def instruction(text: str, arch: str | None = None) -> Instruction:
    """Parse a PTX warp-level matrix instruction (PTX ISA 9.7.14) into an emulator.

    Args:
      text: the instruction as PTX writes it, e.g.
        ``"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"``; trailing operands and
        the semicolon are accepted and ignored.
      arch: the GPU architecture whose behaviour is emulated (``"sm_70"`` ... ``"sm_120"``,
        with an ``a`` suffix for architecture-specific forms such as ``kind::f8f6f4``).
        Default: the newest architecture that runs the form.

    Returns:
      An immutable, hashable :class:`Instruction`.

    Raises:
      ValueError: unknown or forbidden qualifiers (the message names the qualifier, the
        value and the allowed values), or a form that ``arch`` cannot run.
      TypeError: ``text`` or ``arch`` is not a string.

    Example:
      >>> import jaxmma
      >>> ins = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
      >>> ins.m, ins.n, ins.k, ins.nregs
      (16, 8, 16, {'d': 4, 'a': 4, 'b': 2, 'c': 4})
    """
    form, quals, arch_ = spec.parse(text, arch)
    return Instruction(form=form, arch=arch_.name, **quals)


def tcgen05_instruction(
    idesc: int,
    *,
    kind: str,
    cta_group: int = 1,
    scale_vec: str | None = None,
    arch: str | None = None,
) -> Instruction:
    """A ``tcgen05.mma`` form from its raw 32-bit instruction descriptor (PTX ISA 9.7.16).

    Args:
      idesc: the 32-bit ``idesc`` operand (docs/tcgen05.md has its fields).
      kind: the ``.kind`` of the text: ``"f16"``, ``"tf32"``, ``"f8f6f4"``, ``"i8"``,
        ``"mxf8f6f4"``, ``"mxf4"`` or ``"mxf4nvf4"``.
      cta_group: 1 or 2 (``.cta_group::1`` / ``::2``).
      scale_vec: the block-scaled kinds' ``.scale_vectorsize`` (``"block16"``,
        ``"block32"``, ``"scale_vec::2X"``, ...; required for ``mxf4nvf4``).
      arch: as for :func:`instruction` (default ``sm_100a``).

    Returns:
      The :class:`Instruction`, whose ``idesc`` gives the descriptor back (transposes and
      scale factor IDs, which do not change the product, set to 0).

    Raises:
      ValueError: reserved bits set, an unknown type code, a shape the table lacks, a
        sparsity selector the kind does not allow, a ``.ws``-only field; the message
        names the field and the allowed values. Bit 2 (sparse) gives the
        ``tcgen05.mma.sp`` form; its sparsity selector (bits 0-1) says where the metadata
        lies in Tensor Memory and is not kept (the matrix level takes logical metadata).

    Example:
      >>> import jaxmma
      >>> ins = jaxmma.tcgen05_instruction(0x08400490, kind="f16")
      >>> ins.text
      'tcgen05.mma.cta_group::1.kind::f16.m128n256k16.f32.bf16.bf16'
      >>> hex(ins.idesc)
      '0x8400490'
    """
    kinds = list(spec.TCGEN05_K)
    if not isinstance(kind, str):
        raise TypeError(f"kind: expected a str, one of {kinds}, got {spec.shown(kind)}")
    if kind not in kinds:
        bare = kind.removeprefix("kind::")
        hint = f" (without the 'kind::' prefix: {bare!r})" if bare in kinds else ""
        raise ValueError(f"kind: expected one of {kinds}{hint}, got {spec.shown(kind)}")
    if isinstance(cta_group, bool) or not isinstance(cta_group, int | np.integer):
        raise TypeError(f"cta_group: expected the int 1 or 2, got {spec.shown(cta_group)}")
    if cta_group not in (1, 2):
        raise ValueError(f"cta_group: expected 1 or 2, got {cta_group!r}")
    if scale_vec is not None and not isinstance(scale_vec, str):
        raise TypeError(
            f"scale_vec: expected None or a str such as 'block16', got {spec.shown(scale_vec)}"
        )
    if isinstance(idesc, np.integer):  # NumPy's ints too: the same 32-bit word
        idesc = int(idesc)
    fields = spec.idesc_decode(idesc, kind)
    sp = ".sp" if fields["sparse"] else ""
    head = f"tcgen05.mma{sp}.cta_group::{int(cta_group)}.kind::{kind}"
    if kind.startswith("mx"):
        head += ".block_scale" + (f".{scale_vec}" if scale_vec else "")
    elif scale_vec is not None:
        raise ValueError(f"scale_vec: only the block-scaled kinds take one, not .kind::{kind}")
    k = spec.TCGEN05_K[kind] * (2 if fields["sparse"] else 1)
    text = f"{head}.m{fields['m']}n{fields['n']}k{k}.{fields['dtype']}.{fields['atype']}"
    text += f".{fields['btype']}" + (f".{fields['stype']}" if "stype" in fields else "")
    text += "".join(f".{x}" for x in ("satfinite", "negate_a", "negate_b") if fields[x])
    try:
        return instruction(text, arch)
    except ValueError as e:
        if str(e).startswith("arch"):
            raise
        raise ValueError(
            f"idesc: {idesc:#010x} decodes to {text!r}, which is refused: {e}"
        ) from None


def all_instructions(opcode: str | None = None, arch: str | None = None) -> tuple[Instruction, ...]:
    """Every instruction text the spec allows, as :class:`Instruction` objects.

    Expands each form of the table over its layouts, ``.satfinite``, rounding modifiers,
    b1 operations and ``.trans``. State spaces (``.shared``/``.global``) are not expanded.
    With ``arch``, only the forms that architecture runs are returned, emulated as it.

    Raises:
      ValueError: ``opcode`` is not None nor one of the spec's opcodes
        (``"mma"``, ``"wmma.mma"``, ``"ldmatrix"``, ...).
    """
    if opcode is not None and opcode not in spec.OPCODES:
        raise ValueError(
            f"opcode: expected None or one of {', '.join(spec.OPCODES)}, got {spec.shown(opcode)}"
        )
    out = []
    want = None if arch is None else spec.parse_arch(arch)
    for f in spec.forms(opcode):
        if want is not None and not spec.runs_on(f, want):
            continue
        a = (want or spec.default_arch(f)).name
        for (al, bl), sat, rnd, bop, tr in itertools.product(
            f.layouts,
            (False, True) if f.satfinite else (False,),
            f.rounding or (None,),
            f.bitops or (None,),
            f.trans,
        ):
            q: dict[str, Any] = dict(satfinite=sat, rounding=rnd, bitop=bop, trans=tr)
            if f.opcode in ("wmma.load", "wmma.store"):
                q["layout"] = al
            elif f.opcode in ("mma", "wmma.mma"):
                q.update(alayout=al, blayout=bl, scale_vec=f.scale_vec)
            elif f.opcode == "tcgen05.mma":
                q["scale_vec"] = f.scale_vec
            out.append(Instruction(form=f, arch=a, **q))
    return tuple(out)
