"""The Pallas executors (native and emulating kernel) split over devices as XLA splits a
dot: D sharded along batch, M and N with the one-device bits, K never split
(jaxmma/gemm/_partition.py). Run on four host devices in a subprocess (the device count
is fixed when JAX starts)."""

import os
import subprocess
import sys
import textwrap

import pytest

from jaxmma.gemm import _partition

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, jaxmma
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxmma import gemm
    from jaxmma.gemm import _chain, _native, _pallas
    assert len(jax.devices()) == 4
    rng = np.random.default_rng(0)
    line = Mesh(np.array(jax.devices()[:2]), ("x",))
    grid = Mesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))

    def bf16(shape):  # small integers: every sum exact, as interpreted native runs need
        x = rng.integers(-8, 9, shape).astype(np.float32)
        return (x.view(np.uint32) >> 16).astype(np.uint32)

    def e4m3(shape):
        return rng.integers(0, 256, shape).astype(np.uint32) & 0xF7  # no NaN codes

    def f32(shape):
        return rng.integers(-64, 65, shape).astype(np.float32).view(np.uint32)

    def put(x, mesh, spec):
        return x if spec is None else jax.device_put(x, NamedSharding(mesh, spec))

    def check(name, f, ops, mesh, specs, expect, no_gather=False):
        one = np.asarray(f(*ops)).view(np.uint32)
        args = [put(x, mesh, s) for x, s in zip(ops, specs)]
        d = f(*args)
        assert d.dtype.itemsize == 4, name
        assert np.array_equal(np.asarray(d).view(np.uint32), one), f"{name}: bits differ"
        want = NamedSharding(mesh, expect)
        assert d.sharding.is_equivalent_to(want, d.ndim), f"{name}: {d.sharding} not {want}"
        if no_gather:
            hlo = f.lower(*args).compile().as_text()
            assert "all-gather" not in hlo, f"{name}: A or B gathered"
        print("ok", name, d.sharding.spec, flush=True)

    # the native executor, interpreted (wgmma bf16; the K-major fp8 route; promotion)
    bf = gemm.config("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", arch="sm_90a")
    native = jax.jit(lambda a, b, c: _native.gemm_bits(bf, a, b, c, interpret=True))
    A, B, C = bf16((64, 80)), bf16((80, 64)), f32((64, 64))
    check("native M", native, (A, B, C), line, (P("x"), None, None), P("x"), no_gather=True)
    check("native N", native, (A, B, C), line, (None, P(None, "x"), None), P(None, "x"))
    check("native M and N", native, (A, B, C), grid, (P("x"), P(None, "y"), None), P("x", "y"))
    check("native K", native, (A, B, C), line, (P(None, "x"), P("x"), None), P())
    Ab, Cb = bf16((4, 32, 80)), f32((4, 32, 64))
    check("native batch", native, (Ab, B, Cb), line, (P("x"), None, None), P("x"))
    fp8 = gemm.config(
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", arch="sm_90a", promote_every=2
    )
    no_c = jax.jit(lambda a, b: _native.gemm_bits(fp8, a, b, None, interpret=True))
    check("native fp8 M, no C", no_c, (e4m3((64, 96)), e4m3((96, 32))), line, (P("x"), None),
          P("x"), no_gather=True)

    # the block recipe in one kernel: the scales follow A's rows and B's columns
    e8 = jnp.float8_e4m3fn
    A8 = np.asarray(jnp.asarray(rng.integers(-4, 5, (64, 256)), e8).view(jnp.uint8), np.uint32)
    B8 = np.asarray(jnp.asarray(rng.integers(-4, 5, (256, 256)), e8).view(jnp.uint8), np.uint32)
    SA = np.exp2(rng.integers(-3, 4, (64, 2))).astype(np.float32)
    SB = np.exp2(rng.integers(-3, 4, (2, 2))).astype(np.float32)
    e4 = gemm.config("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", arch="sm_90a")
    blk = jax.jit(lambda a, b, sa, sb: _native.block_bits(e4, a, b, sa, sb, interpret=True))
    check("native block scales M", blk, (A8, B8, SA, SB), line, (P("x"), None, P("x"), None),
          P("x"), no_gather=True)
    check("native block scales N", blk, (A8, B8, SA, SB), line,
          (None, P(None, "x"), None, P(None, "x")), P(None, "x"))

    # the block-scaled (NVFP4) kernel, interpreted: its scales follow A's rows, B's columns
    from jaxmma.gemm import _block_kernel, _block_scaled
    nv = jaxmma.instruction(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
        ".f32.e2m1.e2m1.f32.ue4m3", arch="sm_120a")
    cfg4 = gemm.config(nv.text, "sm_120a")

    def scaled_operands(M, K, N, blocks, element, scale):
        # raw A, B, C, SA, SB of a block-scaled GEMM: codes below element, scales in scale
        A = rng.integers(0, element, (M, K)).astype(np.uint32)
        B = rng.integers(0, element, (K, N)).astype(np.uint32)
        SA = rng.integers(*scale, (M, blocks)).astype(np.uint32)
        SB = rng.integers(*scale, (blocks, N)).astype(np.uint32)
        return A, B, f32((M, N)), SA, SB

    ops4 = scaled_operands(64, 128, 32, 8, 16, (0x30, 0x40))
    with _block_kernel.path("interpret"):
        nvk = jax.jit(lambda a, b, c, sa, sb: _block_scaled.gemm_bits(cfg4, a, b, c, (sa, sb)))
        check("block kernel M", nvk, ops4, line,
              (P("x"), None, None, P("x"), None), P("x"), no_gather=True)

    # the kind::mxf8f6f4 window kernel, interpreted: its scales follow A's rows, B's columns
    from jaxmma.gemm import _product_kernel
    mx = "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X" \
         ".f32.e4m3.e4m3.f32.ue8m0"
    cfg8 = gemm.config(mx, "sm_120a")
    ops8 = scaled_operands(32, 64, 32, 2, 0x7F, (120, 134))
    with _product_kernel.path("interpret"):
        pk = jax.jit(lambda a, b, c, sa, sb: _block_scaled.gemm_bits(cfg8, a, b, c, (sa, sb)))
        check("product kernel M", pk, ops8, line,
              (P("x"), None, None, P("x"), None), P("x"), no_gather=True)
        check("product kernel N", pk, ops8, line,
              (None, P(None, "x"), P(None, "x"), None, P(None, "x")), P(None, "x"))

    # vmap: the mapped axis is one more batch dimension
    vm = jax.jit(jax.vmap(lambda a, c: _native.gemm_bits(bf, a, B, c, interpret=True)))
    check("native vmap", vm, (Ab, Cb), line, (P("x"), None), P("x"))

    # the emulating kernel, interpreted
    cfg = gemm.config("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", arch="sm_90")
    kernel = jax.jit(lambda a, b, c: _pallas.gemm_bits(cfg, a, b, c, interpret=True))
    A, B, C = bf16((2, 32, 40)), bf16((40, 32)), f32((2, 32, 32))
    xla = np.asarray(_chain.xla_gemm_bits(cfg, A, B, C))
    assert np.array_equal(np.asarray(kernel(A, B, C)), xla)
    check("kernel M", kernel, (A, B, C), line, (P(None, "x"), None, None), P(None, "x"),
          no_gather=True)
    check("kernel batch and N", kernel, (A, B, C), grid, (P("x"), P(None, "y"), None),
          P("x", None, "y"))
    check("kernel K", kernel, (A, B, C), line, (P(None, None, "x"), P("x"), None), P())

    # through jaxmma.matmul (values in, values out), on the kernel's path
    with _pallas.path("pallas"):
        text = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
        mm = jax.jit(lambda a, b: jaxmma.matmul(a, b, instruction=text, arch="sm_90"))
        Av = rng.standard_normal((32, 40)).astype(jnp.bfloat16)
        Bv = rng.standard_normal((40, 16)).astype(jnp.bfloat16)
        check("matmul M", mm, (Av, Bv), line, (P("x"), None), P("x"), no_gather=True)
    print("OK")
    """
)


@pytest.mark.full  # the quick run keeps make test within 5 minutes; CI runs it
def test_executors_partition_as_a_dot_with_one_device_bits():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr[-3000:]


def test_output_spec_follows_a_dot():
    spec = _partition.out_spec
    # batch, M from A, N from B; K never
    assert spec([(None, "x", "y"), (None, "y", "z")], 1) == (None, "x", "z")
    # one mesh axis serves one dimension: batch first, then M, then N
    assert spec([("x", "x", None), (None, None, "x")], 1) == ("x", None, None)
    assert spec([("x", None), (None, "x")], 0) == ("x", None)
    # C fills in what A and B leave unsharded
    assert spec([(None, None), (None, None), ("y", "x")], 0) == ("y", "x")
    assert spec([(("x", "y"), None), (None, "y")], 0) == (("x", "y"), None)
