"""Run the emulator on the vectors of a form and compare its raw bits with hardware.

The emulator is called through the public API, batched over all warps of a record in one
call per distinct static argument (the sparsity selector and block-scale ids are static Python
ints, and so are ``wmma.load``/``wmma.store``'s ``addr`` and ``stride``; the vectors use a
handful of values of each):

* ``mma``/``wmma.mma``: ``ins(a, b, c)``, ``ins(a, b, c, e, selector=s)``, block scale
  ``ins(a, b, c, scale_a=..., scale_b=..., byte_id_a=..., ...)``;
* ``ldmatrix``: ``ins(smem, addrs)``; ``stmatrix``: ``ins(smem, addrs, regs)``;
  ``movmatrix``: ``ins(a)``;
* ``wmma.load``: ``ins(mem, addr=..., stride=...)``; ``wmma.store``:
  ``ins(mem, regs, addr=..., stride=...)``.

Every output element is compared bit for bit (NaN payloads included). An emulator that
raises ``NotImplementedError``, ``ImportError`` or ``AttributeError`` marks the form
'not implemented'; any other exception is an 'error' with its message.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

NOT_IMPLEMENTED = (NotImplementedError, ImportError, AttributeError)
FAILING = ("mismatch", "error", "crc mismatch", "compile error", "gpu error")


@dataclasses.dataclass
class Result:
    """Outcome of one form. ``equal``/``total``: output elements (registers, or bytes of an
    image) equal to hardware; ``warps_equal``: warps whose every element is equal."""

    text: str
    status: str  # ok | mismatch | not implemented | error | hardware only | ...
    equal: int = 0
    total: int = 0
    warps_equal: int = 0
    warps: int = 0
    seconds: float = 0.0
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status in FAILING


def _calls(ins, vec):
    """(warp indices, positional args, keyword args, output name) per emulator call."""
    op = ins.opcode
    A = vec.arrays
    keys = [tuple(int(x) for x in row) for row in vec.imms]
    groups = {}
    for w, k in enumerate(keys):
        groups.setdefault(k, []).append(w)
    for key, ws in sorted(groups.items()):
        idx = np.asarray(ws)
        kw = dict(zip(vec.imm_names, key[: len(vec.imm_names)], strict=True))
        if op in ("mma", "wmma.mma"):
            names = [n for n in ("a", "b", "c", "e") if n in A]
            kw.update({n: A[n][idx] for n in ("scale_a", "scale_b") if n in A})
            yield idx, [A[n][idx] for n in names], kw, "d"
        elif op == "ldmatrix":
            yield idx, [A["smem"][idx], A["addrs"][idx]], kw, "r"
        elif op == "stmatrix":
            yield idx, [A["smem"][idx], A["addrs"][idx], A["r"][idx]], kw, "smem"
        elif op == "movmatrix":
            yield idx, [A["a"][idx]], kw, "d"
        elif op == "wmma.load":  # addresses and strides per warp, one call
            kw.update(addr=A["addr"][idx], stride=A["stride"][idx])
            yield idx, [A["mem"][idx]], kw, "d"
        else:
            kw.update(addr=A["addr"][idx], stride=A["stride"][idx])
            yield idx, [A["mem"][idx], A["r"][idx]], kw, "mem"


def _needs_x64(vec, hw) -> bool:
    arrays = list(vec.arrays.values()) + list(hw.values())
    return any(a.dtype.itemsize == 8 and a.dtype.kind == "u" for a in arrays)


def emulate(ins, vec) -> dict:
    """The emulator's outputs for all warps of ``vec`` (NumPy, by output name)."""
    import jax

    out = {}
    for idx, args, kw, name in _calls(ins, vec):
        static = {k: v for k, v in kw.items() if not isinstance(v, np.ndarray)}
        arrays = {k: v for k, v in kw.items() if isinstance(v, np.ndarray)}
        res = np.asarray(jax.jit(functools.partial(ins, **static))(*args, **arrays))
        if name not in out:
            out[name] = np.zeros((vec.warps, *res.shape[1:]), res.dtype)
        out[name][idx] = res
    return out


def _first_diff(vec, hw, emu) -> str:
    bad = np.argwhere(hw != emu)
    if not len(bad):
        return ""
    pos = tuple(int(i) for i in bad[0])
    w = pos[0]
    width = hw.dtype.itemsize * 2
    return (
        f"first difference: warp {w} ({vec.dists[w]}"
        + (
            f", {dict(zip(vec.imm_names, vec.imms[w].tolist(), strict=True))}"
            if vec.imm_names
            else ""
        )
        + f") at {pos[1:]}: hardware {int(hw[pos]):#0{width + 2}x}, "
        f"emulator {int(emu[pos]):#0{width + 2}x}"
    )


def compare(ins, vec, hw: dict) -> Result:
    """Emulate ``ins`` on ``vec`` and compare with the hardware outputs ``hw``."""
    import jax

    t0 = time.perf_counter()
    res = Result(ins.text, "ok", warps=vec.warps)
    try:
        if _needs_x64(vec, hw):
            with jax.enable_x64(True):
                emu = emulate(ins, vec)
        else:
            emu = emulate(ins, vec)
    except NOT_IMPLEMENTED as e:
        res.status, res.message = "not implemented", f"{type(e).__name__}: {e}"[:300]
        res.seconds = time.perf_counter() - t0
        return res
    except Exception as e:  # noqa: BLE001 - any emulator failure is reported, never raised
        res.status, res.message = "error", f"{type(e).__name__}: {e}"[:300]
        res.seconds = time.perf_counter() - t0
        return res
    msgs = []
    eq_w = np.ones(vec.warps, bool)
    for name, h in sorted(hw.items()):
        e = emu.get(name)
        if e is None or e.shape != h.shape or e.dtype != h.dtype:
            got = "nothing" if e is None else f"{e.dtype} {list(e.shape)}"
            res.status = "error"
            res.message = f"output {name}: expected {h.dtype} {list(h.shape)}, got {got}"
            res.seconds = time.perf_counter() - t0
            return res
        same = h == e
        res.equal += int(same.sum())
        res.total += same.size
        eq_w &= same.reshape(vec.warps, -1).all(axis=1)
        if not same.all():
            msgs.append(f"{name}: " + _first_diff(vec, h, e))
    res.warps_equal = int(eq_w.sum())
    if res.equal != res.total:
        res.status, res.message = "mismatch", "; ".join(msgs)
    res.seconds = time.perf_counter() - t0
    return res
