"""Render lane maps of a few fragment layouts as pictures (docs/layouts.md).

Each picture is drawn from the layout functions themselves (``jaxmma.operands._layouts``,
``jaxmma.instructions._wmma``): every matrix element is a cell labelled with the lane that holds it
and the register (and sub-word slot) it sits in, coloured by lane.

    python docs/render_layouts.py [OUTDIR]
"""

from __future__ import annotations

import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import jaxmma  # noqa: E402
from jaxmma.operands import (
    _fragments,
    _layouts,  # noqa: E402
)

FIGURES = {
    "mma_m16n8k16_f16_a.png": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "a"),
    "mma_m16n8k16_f16_b.png": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "b"),
    "mma_m16n8k16_f32_c.png": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "c"),
    "mma_m16n8k32_e4m3_a.png": ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "a"),
    "mma_sp_m16n8k32_f16_a.png": (
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32",
        "a",
    ),
    "wmma_m16n16k16_f16_a.png": ("wmma.load.a.sync.aligned.row.m16n16k16.f16", "a"),
}


def lane_map(text: str, operand: str):
    """(lane, register, slot) of every element of the operand's matrix, and a title."""
    ins = jaxmma.instruction(text, arch="sm_90")
    if ins.opcode == "mma":
        lay = _fragments.layout(ins, operand)
        rows, cols = int(lay.row.max()) + 1, int(lay.col.max()) + 1
        per, row, col = lay.elems_per_reg, lay.row, lay.col
    else:
        from jaxmma.instructions import _wmma

        lay = _wmma.operand_layout(ins, operand)
        rows, cols, row, col = lay.rows, lay.cols, lay.row, lay.col
        per = lay.reg_bits // lay.elem_bits
    lane = np.full((rows, cols), -1)
    reg = np.full((rows, cols), -1)
    slot = np.full((rows, cols), -1)
    for ln in range(32):
        for e in range(row.shape[1]):
            r, c = row[ln, e], col[ln, e]
            if lane[r, c] < 0:  # wmma fragments repeat elements: show the first copy
                lane[r, c], reg[r, c], slot[r, c] = ln, e // per, e % per
    return lane, reg, slot, f"{ins.text}\noperand {operand} ({rows} x {cols})"


def render(path: str, text: str, operand: str) -> None:
    lane, reg, slot, title = lane_map(text, operand)
    rows, cols = lane.shape
    fig, ax = plt.subplots(figsize=(max(4, cols * 0.55), max(3, rows * 0.4)))
    ax.imshow(lane % 8 + 8 * (lane // 8 % 2), cmap="tab20", vmin=0, vmax=19)
    for r in range(rows):
        for c in range(cols):
            ax.text(
                c,
                r,
                f"T{lane[r, c]}\nr{reg[r, c]}.{slot[r, c]}",
                ha="center",
                va="center",
                fontsize=5,
            )
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(outdir: str, figures: dict | None = None) -> list[str]:
    """Render ``figures`` (default: every one of FIGURES) and the metadata picture."""
    os.makedirs(outdir, exist_ok=True)
    out = []
    for name, (text, operand) in (FIGURES if figures is None else figures).items():
        path = os.path.join(outdir, name)
        render(path, text, operand)
        out.append(path)
    # the metadata register of the sparse form: which (row, chunk) each nibble describes
    meta = _layouts.metadata_layout(shape="m16n8k32", atype="f16", selector=0)
    fig, ax = plt.subplots(figsize=(5, 6))
    grid = np.where(meta.lane_used[:, None], meta.row * 8 + meta.chunk, -1)
    ax.imshow(grid, cmap="viridis")
    for ln in range(32):
        for n in range(8):
            if meta.lane_used[ln]:
                ax.text(
                    n,
                    ln,
                    f"{meta.row[ln, n]},{meta.chunk[ln, n]}",
                    ha="center",
                    va="center",
                    fontsize=4,
                )
    ax.set_xlabel("nibble")
    ax.set_ylabel("lane")
    ax.set_title("mma.sp m16n8k32 f16 metadata, selector 0:\n(row, chunk) per nibble", fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, "mma_sp_m16n8k32_f16_metadata.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    out.append(path)
    return out


if __name__ == "__main__":
    print(
        "\n".join(
            main(
                sys.argv[1]
                if len(sys.argv) > 1
                else os.path.join(os.path.dirname(os.path.abspath(__file__)), "img")
            )
        )
    )
