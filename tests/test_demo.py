"""The demo (``python -m jaxmma``, jaxmma/__main__.py): its runs are the recipes it
names, and its task is the same on every call and learnable in float32 (the full demo,
with its compiles, is ``make demo``)."""

import jax
import numpy as np

from jaxmma import __main__ as demo
from jaxmma import recipes


def test_runs_are_the_recipes_named():
    runs = demo.runs()
    assert list(runs) == ["f32", "bf16", "fp8", "nvfp4"]
    assert runs["f32"] is None
    assert runs["bf16"] == recipes.bf16()
    assert runs["fp8"] == recipes.current_scaling()
    assert runs["nvfp4"] == recipes.nvfp4()


def test_task_is_the_same_every_call_and_learnable_in_float32():
    data, again = demo.task(), demo.task()
    assert data["x"].shape == (demo.STEPS, demo.BATCH, demo.FEATURES)
    assert all(np.array_equal(a, b) for a, b in zip(data["params"], again["params"], strict=True))
    assert np.array_equal(data["x"], again["x"]) and np.array_equal(data["y"], again["y"])
    assert len(np.unique(data["y"])) == demo.CLASSES
    args = (data["params"], data["x"], data["y"], jax.random.key(0))
    losses, accuracy = jax.jit(demo.trainer(None))(*args)
    assert losses.shape == accuracy.shape == (demo.STEPS,)
    tail = demo.STEPS // 10
    assert np.mean(losses[-tail:]) < 0.5 * np.mean(losses[:tail]), losses
    assert np.mean(accuracy[-tail:]) > 0.8, accuracy
