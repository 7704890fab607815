"""``python -m jaxmma``: the catalogue, a worked example, and conformance against hardware.

Prints (1) every instruction family of PTX ISA 9.7.14 with its form count and the
architectures that run it, (2) a few parsed instructions with their register operands,
(3) one worked ``mma`` as matrices, and (4) the bit-exact conformance of the emulator
against the golden vectors captured on a real GPU (``tests/golden/``), form by form.
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np

import jaxmma
from jaxmma import _ptx, _spec

EXAMPLES = (
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32",
    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32",
    "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32",
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3",
    "mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.xor.popc",
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
)
ARCHS = ("sm_70", "sm_75", "sm_80", "sm_89", "sm_90", "sm_100a", "sm_120a")


def _family(form) -> str:
    name = form.opcode + (f".{form.sparse}" if form.sparse else "")
    if form.opcode in ("mma", "wmma.mma", "wmma.load", "wmma.store"):
        t = form.atype or form.btype or form.ctype or form.dtype
        if form.kind:
            t = f"kind::{form.kind}"
        elif t in ("e4m3", "e5m2"):
            t = "fp8"
        elif t in ("s8", "u8"):
            t = "s8/u8"
        elif t in ("s4", "u4"):
            t = "s4/u4"
        return f"{name} .{t}" if not t.startswith("kind") else f"{name} .{t}"
    return name


def catalogue() -> None:
    print("== The instruction table (PTX ISA 9.7.14) ==")
    rows = collections.OrderedDict()
    for f in _spec.FORMS:
        rows.setdefault(_family(f), []).append(f)
    head = f"{'family':44s} {'texts':>5s}  " + " ".join(f"{a:>7s}" for a in ARCHS)
    print(head)
    for fam, forms in rows.items():
        runs = []
        for a in ARCHS:
            arch = _ptx.parse_arch(a)
            n = sum(f.variants for f in forms if _ptx.runs_on(f, arch))
            runs.append(f"{n:7d}" if n else f"{'-':>7s}")
        print(f"{fam:44s} {sum(f.variants for f in forms):5d}  " + " ".join(runs))
    print(f"{'total':44s} {_spec.count_variants():5d}")
    print()


def parsed_examples() -> None:
    print("== Parsed instructions ==")
    for text in EXAMPLES:
        ins = jaxmma.instruction(text)
        ops = ", ".join(
            f"{o.name}: {o.nregs}x{o.reg_bits}b"
            + (f" ({32 // o.elem_bits} x .{o.fmt})" if o.fmt and o.elem_bits < 32 else "")
            for o in ins.operands
        )
        print(
            f"{ins.text}\n    arch={ins.arch} (runs on {ins.targets}, PTX {ins.ptx_version})"
            f"  registers per lane: {ops}"
        )
    print()


def worked_example() -> None:
    import jax.numpy as jnp

    print("== A worked example: m16n8k16 bf16 on sm_90, matrix level ==")
    ins = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
    rng = np.random.default_rng(1)
    A = jnp.asarray(rng.standard_normal((16, 16)), jnp.bfloat16)
    B = jnp.asarray(rng.standard_normal((16, 8)), jnp.bfloat16)
    C = jnp.asarray(rng.standard_normal((16, 8)) * 1e-3, jnp.float32)
    D = np.asarray(ins.mma(A, B, C))
    exact = np.asarray(ins.mma(A, B, C, model="exact"))
    ref = np.asarray(A, np.float64) @ np.asarray(B, np.float64) + np.asarray(C, np.float64)
    np.set_printoptions(precision=5, suppress=True, linewidth=120)
    print("D[:4, :4] emulated sm_90:\n", D[:4, :4])
    diff = (D.view(np.uint32) != exact.view(np.uint32)).sum()
    print(
        f"registers differing from one exact rounding: {diff} of {D.size};"
        f" max |D - A@B+C (float64)| = {np.abs(D - ref).max():.3g}"
    )
    print()


def conformance() -> int:
    golden = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "golden", "sm_90"
    )
    print("== Conformance against hardware golden vectors ==")
    if not os.path.isdir(golden) or not any(n.endswith(".npz") for n in os.listdir(golden)):
        print(f"(no golden files under {golden})")
        return 0
    from jaxmma.conformance import __main__ as conf

    return conf.main(["check", "--golden", golden])


def main() -> int:
    catalogue()
    parsed_examples()
    worked_example()
    return conformance()


if __name__ == "__main__":
    sys.exit(main())
