"""An eager ``mma.sp`` call runs as one compiled program with the op-by-op call's rules
(``instructions/_dispatch.py``): the same bits, the same ``ValueError`` where the checks
find a bad value, the :class:`jaxmma.sparse.checked` default read at each call, and a
handful of compilations instead of hundreds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma

TEXT = "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"


def _ins():
    return jaxmma.instruction(TEXT, arch="sm_90")


def _dense_a(rng, batch=()):
    """A 2:4 dense A (columns 0 and 2 of every 4 non-zero)."""
    A = rng.standard_normal((*batch, 16, 32)) * np.tile([1, 0, 1, 0], 8)
    return jnp.asarray(A, jnp.bfloat16)


def _bits(x):
    return np.asarray(x).view(np.uint32)


def _op_by_op(ins, entry, *args, **kwargs):
    """The implementation called directly: every operation dispatched on its own."""
    return getattr(ins._implementation(), entry)(ins, *args, **kwargs)


@pytest.mark.full  # make test within 5 minutes (9.5 s)
def test_eager_call_gives_the_op_by_op_bits():
    ins, rng = _ins(), np.random.default_rng(1)
    A = _dense_a(rng, (2,))
    B = jnp.asarray(rng.standard_normal((2, 32, 8)), jnp.bfloat16)
    C = jnp.asarray(rng.standard_normal((2, 16, 8)), jnp.float32)
    got = ins.mma(A, B, C)
    want = _op_by_op(ins, "matrix_mma", A, B, C)
    assert np.array_equal(_bits(got), _bits(want))
    # register level, with metadata registers decoded from valid nibbles
    a, b, c = (ins.fragment(op, m) for op, m in (("a", A[0, :, ::2]), ("b", B[0]), ("c", C[0])))
    e = np.full(32, 0x88888888, np.uint32)  # 0b1000: columns 0 and 2 of every chunk
    d = ins(a, b, c, e, selector=0)
    assert np.array_equal(_bits(d), _bits(_op_by_op(ins, "execute", a, b, c, e, selector=0)))
    assert np.array_equal(_bits(ins.unfragment("d", d)), _bits(got[0]))


def test_bad_operands_raise_the_op_by_op_error():
    ins, rng = _ins(), np.random.default_rng(2)
    A = jnp.asarray(rng.standard_normal((16, 32)), jnp.bfloat16)  # 4 non-zeros per chunk
    B = jnp.asarray(rng.standard_normal((32, 8)), jnp.bfloat16)
    C = jnp.zeros((16, 8), jnp.float32)
    with pytest.raises(ValueError) as want:
        _op_by_op(ins, "matrix_mma", A, B, C)
    with pytest.raises(ValueError) as got:
        ins.mma(A, B, C)
    assert str(got.value) == str(want.value) and "has 4 non-zero elements" in str(got.value)
    # the next call with valid operands is not affected
    A = _dense_a(rng)
    assert np.array_equal(_bits(ins.mma(A, B, C)), _bits(_op_by_op(ins, "matrix_mma", A, B, C)))


def test_the_checked_default_is_read_at_each_call():
    """Nibble 0b0000 (i0 == i1) is undefined: decoded as the hardware does unless checked.
    The same call, compiled once unchecked, must still raise inside ``checked()``."""
    ins = _ins()
    a = np.zeros((32, ins.nregs["a"]), np.uint32)
    b = np.zeros((32, ins.nregs["b"]), np.uint32)
    c = np.zeros((32, ins.nregs["c"]), np.uint32)
    e = np.zeros(32, np.uint32)
    d = ins(a, b, c, e, selector=0)
    assert np.array_equal(_bits(d), _bits(_op_by_op(ins, "execute", a, b, c, e, selector=0)))
    with jaxmma.sparse.checked(), pytest.raises(ValueError, match="invalid sparse metadata"):
        ins(a, b, c, e, selector=0)
    with pytest.raises(ValueError, match="lane 0, nibble 0"):
        ins(a, b, c, e, selector=0, check=True)
    assert np.array_equal(_bits(ins(a, b, c, e, selector=0)), _bits(d))


def test_a_first_eager_call_compiles_a_handful_of_programs():
    ins, rng = _ins(), np.random.default_rng(3)
    shape = (3, 5)  # leading dimensions no other test uses: nothing is cached in process
    A = _dense_a(rng, shape)
    B = jnp.asarray(rng.standard_normal((*shape, 32, 8)), jnp.bfloat16)
    C = jnp.zeros((*shape, 16, 8), jnp.float32)
    events = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        ins.mma(A, B, C)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    # op by op, the same call lowers hundreds of programs (one per operation and shape)
    assert 1 <= len(events) <= 5, len(events)
