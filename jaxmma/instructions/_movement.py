"""``ldmatrix``, ``stmatrix`` and ``movmatrix`` on shared-memory images (9.7.14.5.15-17).

Conventions (``docs/internals.md``): ``smem`` is a ``uint8 [..., nbytes]`` image of shared memory,
``addrs`` ``uint32 [..., 32]`` holds each lane's byte offset into it (only the lanes the
spec assigns row addresses to are read), registers are ``uint32 [..., 32, nregs]``.

Row addresses must be 16-byte aligned and the rows must lie inside the image. With
concrete addresses a violation raises ``ValueError``; under ``jax.jit`` the addresses are
not known when the program is built: an element outside the image reads as zero and its
store is dropped (never wrapped or redirected, whatever the address, :mod:`_memory`).
``check=True`` (``ins(smem, addrs, check=True)``) makes traced addresses outside the
image or misaligned a run-time error (:func:`jaxmma._errors.raise_if`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import bits, operands, util

ALIGN = 16


def layout(ins):
    fn = operands.ldmatrix_layout if ins.opcode == "ldmatrix" else operands.stmatrix_layout
    return fn(shape=ins.shape, num=ins.form.num, trans=ins.trans, elem=ins.form.elem)


def _check_addrs(addrs, lay, nbytes: int):
    addrs = bits.registers(addrs, "addrs")
    if addrs.dtype != jnp.uint32:
        raise TypeError(f"addrs: expected uint32 byte offsets [..., 32], got {addrs.dtype}")
    if addrs.ndim < 1 or addrs.shape[-1] != 32:
        raise ValueError(f"addrs: expected shape [..., 32], got {tuple(addrs.shape)}")
    if util.is_traced(addrs):
        return addrs
    used = np.unique(np.asarray(lay.addr_lane).reshape(-1))
    a = np.asarray(addrs)[..., used].astype(np.int64)
    row_bytes = max(lay.cols * lay.mem_bits // 8, ALIGN)
    bad = np.nonzero(a % ALIGN)
    if bad[0].size:
        lane = used[bad[-1][0]]
        raise ValueError(
            f"addrs: lane {lane} row address {a[bad][0]} is not a multiple of "
            f"{ALIGN} bytes (ldmatrix/stmatrix rows must be 16-byte aligned)"
        )
    over = np.nonzero(a + row_bytes > nbytes)
    if over[0].size:
        lane = used[over[-1][0]]
        raise ValueError(
            f"addrs: lane {lane} row [{a[over][0]}, {a[over][0] + row_bytes}) "
            f"lies outside the {nbytes}-byte shared-memory image [0, {nbytes})"
        )
    return addrs


def _element_offsets(lay, addrs, nbytes: int):
    """Bit offset of every register element in the image: uint32 ``[..., 32, nelem]``,
    saturated at the end of the image (:mod:`jaxmma._memory`)."""
    src = np.asarray(lay.addr_lane)[lay.mat, lay.row]  # [32, nelem]: lane giving the row
    base = jnp.take(addrs, jnp.asarray(src.reshape(-1)), axis=-1).reshape(
        addrs.shape[:-1] + src.shape
    )
    base = operands.memory_scale(operands.memory_clamp(base, nbytes, 8), 8, nbytes)
    return operands.memory_add(base, np.asarray(lay.col, np.int64) * lay.mem_bits, nbytes)


def _check_traced(ins, lay, addrs, bitoff, nbytes: int, check: bool) -> None:
    if not check or not util.is_traced(addrs, bitoff):
        return
    used = np.unique(np.asarray(lay.addr_lane).reshape(-1))
    aligned = (addrs[..., used] % jnp.uint32(ALIGN)) == 0
    ok = jnp.all(operands.memory_inside(bitoff, lay.mem_bits, nbytes)) & jnp.all(aligned)
    operands.memory_check_traced(ok, "addrs", ins.opcode)


def _check_flag(check) -> bool:
    if not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"check: expected True or False, got {check!r}")
    return bool(check)


def ldmatrix(ins, smem, addrs, *, check=False):
    lay = layout(ins)
    check = _check_flag(check)
    smem = operands.check_image(smem, "smem")
    addrs = _check_addrs(addrs, lay, smem.shape[-1])
    smem, addrs = _broadcast(smem, addrs)
    bitoff = _element_offsets(lay, addrs, smem.shape[-1])
    _check_traced(ins, lay, addrs, bitoff, smem.shape[-1], check)
    elems = operands.memory_read(smem, bitoff, lay.mem_bits)
    return operands.fragment_pack(elems, lay.elem_bits)


def stmatrix(ins, smem, addrs, regs, *, check=False):
    lay = layout(ins)
    check = _check_flag(check)
    smem = operands.check_image(smem, "smem")
    addrs = _check_addrs(addrs, lay, smem.shape[-1])
    regs = bits.registers(regs, "regs")
    if regs.dtype != jnp.uint32:
        raise TypeError(f"regs: expected uint32 registers [..., 32, {lay.nregs}], got {regs.dtype}")
    if regs.ndim < 2 or regs.shape[-2:] != (32, lay.nregs):
        raise ValueError(
            f"regs: expected shape [..., 32, {lay.nregs}] for {ins.text}, got {tuple(regs.shape)}"
        )
    smem, addrs, regs = util.broadcast(
        (("smem", smem, 1), ("addrs", addrs, 1), ("regs", regs, 2)), ins.text
    )
    elems = operands.fragment_unpack(regs, lay.elem_bits)  # [..., 32, nelem]
    bitoff = _element_offsets(lay, addrs, smem.shape[-1])
    _check_traced(ins, lay, addrs, bitoff, smem.shape[-1], check)
    return operands.memory_write(smem, bitoff, elems, lay.mem_bits)


def _broadcast(smem, addrs):
    return util.broadcast((("smem", smem, 1), ("addrs", addrs, 1)))


def movmatrix(ins, a):
    a = bits.registers(a, "a")
    if a.dtype != jnp.uint32:
        raise TypeError(f"a: expected uint32 registers [..., 32], got {a.dtype}")
    if a.ndim < 1 or a.shape[-1] != 32:
        raise ValueError(f"a: expected shape [..., 32], got {tuple(a.shape)}")
    mv = operands.movmatrix_layout()
    halves = operands.fragment_unpack(a[..., None], 16).reshape(a.shape[:-1] + (64,))
    pos = (mv.src.row * 8 + mv.src.col).reshape(-1)  # where each source half sits in M
    m = halves[..., np.argsort(pos, kind="stable")]  # M, row-major [..., 64]
    want = (mv.dst.row * 8 + mv.dst.col).reshape(-1)
    d = m[..., want].reshape(a.shape[:-1] + (32, 2))
    return operands.fragment_pack(d, 16)[..., 0]


def execute(ins, *args, **kwargs):
    fn = {"ldmatrix": ldmatrix, "stmatrix": stmatrix, "movmatrix": movmatrix}[ins.opcode]
    try:
        return fn(ins, *args, **kwargs)
    except TypeError as err:
        if "positional argument" in str(err) or "unexpected keyword" in str(err):
            sig = {
                "ldmatrix": "ins(smem, addrs, *, check=False)",
                "stmatrix": "ins(smem, addrs, regs, *, check=False)",
                "movmatrix": "ins(a)",
            }[ins.opcode]
            raise TypeError(f"{ins.opcode} is called as {sig}: {err}") from None
        raise


def matrix_mma(ins, *args, **kwargs):
    raise ValueError(f"{ins.opcode} moves data; it has no matrix product (use ins(...))")
