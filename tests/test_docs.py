"""The layout pictures of docs/layouts.md render from the layout functions."""

import importlib.util
import os

import numpy as np
from _suite import sample

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _renderer():
    spec = importlib.util.spec_from_file_location(
        "render_layouts", os.path.join(DOCS, "render_layouts.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pictures_render(tmp_path):
    """Every picture of docs/img renders (the quick run draws one of the six layout
    pictures, and the metadata picture; the full sweep all of them)."""
    mod = _renderer()
    figures = dict(sample(sorted(mod.FIGURES.items()), lambda f: 0, salt="pictures"))
    paths = mod.main(str(tmp_path), figures)
    assert len(paths) == len(figures) + 1
    assert len(mod.FIGURES) == 6
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(p) > 10_000  # a drawn grid, not an empty canvas
        assert os.path.exists(os.path.join(DOCS, "img", os.path.basename(p)))


def test_pictured_lane_map_is_the_spec_formula():
    # 9.7.14.5.8, A of m16n8k16 .f16: groupID = lane >> 2, tig = lane % 4;
    # a_i: row = groupID (+8 for i in {2,3,6,7}), col = tig * 2 + (i & 1) (+8 for i >= 4)
    lane, reg, slot, _ = _renderer().lane_map(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "a"
    )
    want_lane = np.zeros((16, 16), int)
    want_reg = np.zeros((16, 16), int)
    for ln in range(32):
        for i in range(8):
            r = (ln >> 2) + (8 if i in (2, 3, 6, 7) else 0)
            c = (ln % 4) * 2 + (i & 1) + (8 if i >= 4 else 0)
            want_lane[r, c], want_reg[r, c] = ln, i // 2
    np.testing.assert_array_equal(lane, want_lane)
    np.testing.assert_array_equal(reg, want_reg)
    assert set(np.unique(slot)) == {0, 1}
