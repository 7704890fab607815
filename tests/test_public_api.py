"""Every keyword parameter of the public API refuses an invalid value by name.

Walks ``jaxmma.__all__`` and the public submodules (``formats``, ``quant``, ``sparse``,
``layouts``, ``recipes``, ``policy``: docs/internals.md), and for each parameter with a default
calls the function with valid arguments (``CALLS``) but that parameter set to a value of
a wrong type (:data:`JUNK`, an object of no type any parameter takes) and to a string
no parameter takes. Each call must raise ``ValueError`` or ``TypeError`` whose message
names the parameter. ``ALLOWED`` lists, with the reason, the parameters for which such
a value is not invalid. A public function missing from ``CALLS`` fails the walk, so a
new one is checked from the day it lands.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

MODULES = {
    "jaxmma": jaxmma,
    "formats": jaxmma.formats,
    "quant": jaxmma.quant,
    "sparse": jaxmma.sparse,
    "layouts": jaxmma.layouts,
    "recipes": jaxmma.recipes,
    "policy": jaxmma.policy,
}


class _Junk:
    """A value of no type that any parameter takes."""

    def __repr__(self):
        return "<junk>"


JUNK = _Junk()
BOGUS = "no-such-value"

BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
SP = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"
MX = (
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0"
)


def _ins(text=BF16):
    return jaxmma.instruction(text, arch="sm_90" if "kind" not in text else "sm_120a")


def _x(*shape):
    return jnp.ones(shape, jnp.float32)


def _calls():
    """name -> (positional arguments, keyword arguments) of one valid call."""
    A, B = _x(16, 16), _x(16, 8)
    dn = (((1,), (0,)), ((), ()))
    e4 = jnp.ones((1, 16, 64), jnp.float8_e4m3fn)
    s8 = jnp.ones((1, 16, 2), jnp.float8_e8m0fnu)
    q = jaxmma.quant.quantize_mx(_x(2, 32), "e4m3")
    sp = _ins(SP)
    hlo = jax.jit(lambda x: x + 1).lower(np.float32(1)).compile().as_text()
    return {
        "jaxmma.all_instructions": ((), {}),
        "jaxmma.cpu_compiler_options": ((), {}),
        "jaxmma.dot_general": ((A, B, dn), dict(instruction=BF16, arch="sm_90")),
        "jaxmma.instruction": ((BF16,), {}),
        "jaxmma.matmul": ((A, B), dict(instruction=BF16, arch="sm_90")),
        "jaxmma.scaled_dot_general": (
            (_x(1, 16, 64), _x(1, 8, 64), (((2,), (2,)), ((0,), (0,)))),
            dict(configs=[jax.nn.get_scaled_dot_general_config("mxfp8")] * 2),
        ),
        "jaxmma.scaled_matmul": ((e4, e4[:, :8], s8, s8[:, :8]), {}),
        "jaxmma.tcgen05_instruction": ((0x08400490,), dict(kind="f16")),
        "jaxmma.xla_gpu_dots": ((hlo,), {}),
        "jaxmma.gpu_replay": ((lambda x: x, hlo), {}),
        "jaxmma.with_policy": ((lambda a, b: a @ b, jaxmma.presets.H100_BF16), {}),
        "policy.with_policy": ((lambda a, b: a @ b, jaxmma.presets.H100_BF16), {}),
        "policy.dots": ((lambda a, b: a @ b, jaxmma.presets.H100_BF16), {}),
        "policy.init_state": ((lambda a, b: a @ b, jaxmma.presets.H100_BF16), {}),
        "policy.stats": ((lambda a, b: a @ b, jaxmma.presets.H100_BF16), {}),
        "policy.gemm": ((BF16,), dict(arch="sm_90")),
        "formats.decode": (("bf16", jnp.uint32(0)), {}),
        "formats.encode": (("bf16", _x(4)), {}),
        "formats.fields": (("bf16", jnp.uint32(0)), {}),
        "formats.from_container": (("e2m1", jnp.uint32(0)), {}),
        "formats.get_format": (("bf16",), {}),
        "formats.pack": ((jnp.zeros((4,), jnp.uint32), 8), {}),
        "formats.round_to_format": (("bf16", _x(4)), {}),
        "formats.to_container": (("e2m1", jnp.uint32(0)), {}),
        "formats.unpack": ((jnp.zeros((1,), jnp.uint32), 8), {}),
        "quant.as_operands": (
            (_ins(MX), q, jaxmma.quant.quantize_mx(_x(32, 8), "e4m3", axis=-2)),
            {},
        ),
        "quant.dequantize": ((q,), {}),
        "quant.fake_quantize_mx": ((_x(2, 32), "e4m3"), {}),
        "quant.fake_quantize_nvfp4": ((_x(2, 32),), {}),
        "quant.nvfp4_global_scale": ((_x(2, 32),), {}),
        "quant.quantize_mx": ((_x(2, 32), "e4m3"), {}),
        "quant.quantize_nvfp4": ((_x(2, 32),), {}),
        "quant.raw_bits": ((q,), {}),
        "quant.shared_exponent": ((_x(2), "e4m3"), {}),
        "sparse.compress": ((sp, jnp.zeros((16, 32), jnp.bfloat16)), {}),
        "sparse.decompress": (
            (sp, jnp.zeros((16, 16), jnp.bfloat16), jnp.zeros(32, jnp.uint32)),
            {},
        ),
        "sparse.is_checked": ((), {}),
        "sparse.metadata_indices": ((sp, jnp.zeros(32, jnp.uint32), 0), {}),
        "sparse.prune": ((sp, jnp.zeros((16, 32), jnp.bfloat16)), {}),
        "sparse.validate": ((sp, jnp.zeros((16, 32), jnp.bfloat16)), {}),
        "layouts.block_size": ((_ins(MX),), {}),
        "layouts.num_blocks": ((_ins(MX),), {}),
        "layouts.operand_map": ((_ins(), "a"), {}),
        "layouts.scale_shapes": ((_ins(MX),), {}),
        "recipes.all_finite": (({"a": _x(2)},), {}),
        "recipes.amax": ((_x(2),), {}),
        "recipes.stats": ((_x(2), "e4m3"), {}),
        "recipes.bf16": ((), {}),
        "recipes.blockwise": ((), {}),
        "recipes.current_scaling": ((), {}),
        "recipes.delayed_scaling": ((), {}),
        "recipes.dynamic_init": ((), {}),
        "recipes.dynamic_update": ((jaxmma.recipes.dynamic_init(), {"a": _x(2)}), {}),
        "recipes.hadamard_rows": ((_x(16, 2), _x(16)), {}),
        "recipes.mxfp4": ((), {}),
        "recipes.mxfp8": ((), {}),
        "recipes.nvfp4": ((), {}),
        "recipes.quantize_nvfp4_2d": ((_x(16, 16),), {}),
        "recipes.rowwise": ((), {}),
        "recipes.scale_from_amax": ((jnp.float32(1), "e4m3"), {}),
        "recipes.scale_loss": ((jnp.float32(1), 2.0), {}),
        "recipes.unscale": (({"a": _x(2)}, 2.0), {}),
    }


#: (function, parameter, value kind): where the value is not invalid, and why
ALLOWED = {
    # precision is accepted and ignored, as a drop-in for lax.dot_general's (any value)
    ("jaxmma.dot_general", "precision", "junk"),
    ("jaxmma.dot_general", "precision", "bogus"),
    ("jaxmma.scaled_dot_general", "precision", "junk"),
    ("jaxmma.scaled_dot_general", "precision", "bogus"),
    # implementation is deprecated and ignored, as in jax.nn (a DeprecationWarning)
    ("jaxmma.scaled_dot_general", "implementation", "junk"),
    ("jaxmma.scaled_dot_general", "implementation", "bogus"),
}


def _public():
    for mod_name, mod in MODULES.items():
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj):
                yield f"{mod_name}.{name}", obj


def _keyword_parameters(fn):
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty or p.kind == p.KEYWORD_ONLY:
            yield p.name


def test_every_public_function_has_a_valid_call():
    calls = _calls()
    missing = [name for name, _ in _public() if name not in calls]
    assert not missing, f"add a valid call to CALLS for {missing}"
    for name, fn in _public():  # the base calls themselves are valid
        args, kwargs = calls[name]
        fn(*args, **kwargs)


CASES = [
    (name, param, kind)
    for name, fn in _public()
    for param in _keyword_parameters(fn)
    for kind in ("junk", "bogus")
    if (name, param, kind) not in ALLOWED
]


@pytest.mark.every_case
@pytest.mark.parametrize(("name", "param", "kind"), CASES)
def test_an_invalid_keyword_value_is_refused_by_name(name, param, kind):
    fn = dict(_public())[name]
    args, kwargs = _calls()[name]
    value = JUNK if kind == "junk" else BOGUS
    sig = inspect.signature(fn)
    bound = sig.bind_partial(*args, **kwargs)
    bound.arguments[param] = value
    with pytest.raises((ValueError, TypeError)) as e:
        fn(*bound.args, **bound.kwargs)
    assert param in str(e.value), f"{name}({param}={value!r}): {str(e.value)[:300]}"
