"""Bad inputs across the public API: each is refused at trace time with a clear error.

Every case names the call, the exception type and a pattern the message must match (the
argument's name, and where it helps what is allowed). A case passes only when exactly
that exception is raised: a silently accepted input (no exception), a crash inside JAX
(an exception of another type, or a message that does not name the argument) and a
wrong exception type all fail. Cases whose array arguments can be traced run twice:
eagerly and under ``jax.jit`` (errors must come at trace time, not from XLA).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmma
from jaxmma import formats as F
from jaxmma import quant as Q
from jaxmma import sparse as S

U32 = jnp.uint32

BF16 = jaxmma.instruction("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
F64 = jaxmma.instruction("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64")
SP = jaxmma.instruction("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32")
MX = jaxmma.instruction(
    "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
    ".f32.e4m3.e4m3.f32.ue8m0"
)
NV = jaxmma.instruction(
    "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
    ".f32.e2m1.e2m1.f32.ue4m3"
)
WLD = jaxmma.instruction("wmma.load.a.sync.aligned.row.m16n16k16.f16", arch="sm_90")
WST = jaxmma.instruction("wmma.store.d.sync.aligned.row.m16n16k16.f32", arch="sm_90")
WMMA = jaxmma.instruction("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32", arch="sm_90")
LD = jaxmma.instruction("ldmatrix.sync.aligned.m8n8.x1.shared.b16")
ST = jaxmma.instruction("stmatrix.sync.aligned.m8n8.x1.shared.b16")
MOV = jaxmma.instruction("movmatrix.sync.aligned.m8n8.trans.b16")


def z(shape, dtype=U32):
    return np.zeros(shape, dtype)  # numpy: no JAX dispatch while the module is collected


A4, B2, C4 = z((32, 4)), z((32, 2)), z((32, 4))
SMEM = z((256,), jnp.uint8)
ADDRS = jnp.asarray(np.arange(32) % 8 * 16, U32)
MEM = z((2048,), jnp.uint8)
AM, BM, CM = z((16, 16), jnp.bfloat16), z((16, 8), jnp.bfloat16), z((16, 8), jnp.float32)
E_OK = jnp.full((32,), 0x44444444, U32)  # nibble 0b0100: keep 0 and 1 (ordered: fine)
X = jnp.ones((4, 32), jnp.float32)

CASES: list[tuple] = []  # (id, fn, args, kwargs, exception, pattern, jit)


def case(cid, exc, pattern, fn, *args, jit=True, **kwargs):
    CASES.append(pytest.param(fn, args, kwargs, exc, pattern, jit, id=cid))


# ---------------------------------------------------------------- instruction()
case("instruction-text-int", TypeError, "text", jaxmma.instruction, 123, jit=False)
case("instruction-text-empty", ValueError, "text is empty", jaxmma.instruction, "", jit=False)
case(
    "instruction-bad-shape",
    ValueError,
    "m16n8k15",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k15.row.col.f32.bf16.bf16.f32",
    jit=False,
)
case(
    "instruction-bad-type",
    ValueError,
    "bf17",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf17.bf16.f32",
    jit=False,
)
case(
    "instruction-bad-layout",
    ValueError,
    "col",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k16.col.row.f32.bf16.bf16.f32",
    jit=False,
)
case(
    "instruction-arch-unknown",
    ValueError,
    "arch",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    arch="sm_1000",
    jit=False,
)
case(
    "instruction-arch-int",
    TypeError,
    "arch",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    arch=90,
    jit=False,
)
case(
    "instruction-arch-too-old",
    ValueError,
    "sm_70",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    arch="sm_70",
    jit=False,
)
case(
    "instruction-kind-needs-a",
    ValueError,
    "sm_90",
    jaxmma.instruction,
    "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32",
    arch="sm_90",
    jit=False,
)
case(
    "instruction-unknown-opcode",
    ValueError,
    "opcode .mmx.; allowed",
    jaxmma.instruction,
    "mmx.sync",
    jit=False,
)

# ---------------------------------------------------------------- mma, register level
case("mma-a-float32", TypeError, "a: expected uint32", BF16, z((32, 4), jnp.float32), B2, C4)
case("mma-a-int32", TypeError, "a: expected uint32", BF16, z((32, 4), jnp.int32), B2, C4)
case("mma-b-uint16", TypeError, "b: expected uint32", BF16, A4, z((32, 2), jnp.uint16), C4)
case("mma-c-bfloat16", TypeError, "c: expected uint32", BF16, A4, B2, z((32, 4), jnp.bfloat16))
case("mma-a-nregs", ValueError, r"a: .*\[\.\.\., 32, 4\]", BF16, z((32, 3)), B2, C4)
case("mma-a-lanes", ValueError, r"a: .*\[\.\.\., 32, 4\]", BF16, z((16, 4)), B2, C4)
case("mma-c-rank1", ValueError, r"c: .*\[\.\.\., 32, 4\]", BF16, A4, B2, z((32,)))
case(
    "mma-batch-mismatch",
    ValueError,
    "batch.*a \\(2,\\), b \\(3,\\)",
    BF16,
    z((2, 32, 4)),
    z((3, 32, 2)),
    C4,
)
case("mma-batch-c", ValueError, "batch.*c \\(5,\\)", BF16, z((2, 32, 4)), B2, z((5, 32, 4)))
case("mma-e-on-dense", ValueError, "e/selector", BF16, A4, B2, C4, E_OK)
case("mma-selector-on-dense", ValueError, "e/selector", BF16, A4, B2, C4, selector=0)
case("mma-check-on-dense", ValueError, "check", BF16, A4, B2, C4, check=True)
case("mma-scale-on-dense", ValueError, "scale_a", BF16, A4, B2, C4, scale_a=z((32,)))
case("mma-model", ValueError, "model", BF16, A4, B2, C4, model="fast")
case("mma-list-negative", ValueError, "a: Python ints", BF16, [[-1] * 4] * 32, B2, C4, jit=False)
case("mma-list-too-big", ValueError, "a: Python ints", BF16, [[2**32] * 4] * 32, B2, C4, jit=False)
case("mma-f64-without-x64", TypeError, "jax_enable_x64", F64, z((32, 1)), z((32, 1)), z((32, 2)))
case("mma-unknown-keyword", TypeError, "foo", BF16, A4, B2, C4, foo=1)

# ---------------------------------------------------------------- mma.sp
SPA, SPB = z((32, 4)), z((32, 4))
case("sp-e-missing", ValueError, "e: the metadata operand", SP, SPA, SPB, C4, selector=0)
case(
    "sp-e-int32", TypeError, "e: expected uint32", SP, SPA, SPB, C4, z((32,), jnp.int32), selector=0
)
case("sp-e-shape", ValueError, r"e: .*\[\.\.\., 32\]", SP, SPA, SPB, C4, z((16,)), selector=0)
case("sp-selector-range", ValueError, "selector=5", SP, SPA, SPB, C4, E_OK, selector=5)
case("sp-selector-str", ValueError, "selector='0'", SP, SPA, SPB, C4, E_OK, selector="0")
case("sp-selector-missing", ValueError, "selector=None", SP, SPA, SPB, C4, E_OK)
case("sp-check-str", TypeError, "check", SP, SPA, SPB, C4, E_OK, selector=0, check="yes")
case(
    "sp-bad-nibble-checked",
    ValueError,
    "lane 0, nibble 0",
    SP,
    SPA,
    SPB,
    C4,
    jnp.full((32,), 0x44444441, U32),
    selector=0,
    check=True,
    jit=False,
)
case(
    "sp-batch-e",
    ValueError,
    r"batch.*e \(3,\)",
    SP,
    z((2, 32, 4)),
    SPB,
    C4,
    jnp.broadcast_to(E_OK, (3, 32)),
    selector=0,
)

# ---------------------------------------------------------------- block scale
MA, MB = z((32, 4)), z((32, 2))
SD = z((32,))
case("bs-scale-a-missing", ValueError, "scale_a: required", MX, MA, MB, C4, scale_b=SD)
case(
    "bs-scale-b-int32",
    TypeError,
    "scale_b: expected uint32",
    MX,
    MA,
    MB,
    C4,
    scale_a=SD,
    scale_b=z((32,), jnp.int32),
)
case(
    "bs-scale-a-shape",
    ValueError,
    r"scale_a: expected shape \[\.\.\., 32\]",
    MX,
    MA,
    MB,
    C4,
    scale_a=z((16,)),
    scale_b=SD,
)
case("bs-byte-id-a", ValueError, "byte_id_a=5", MX, MA, MB, C4, scale_a=SD, scale_b=SD, byte_id_a=5)
case(
    "bs-thread-id-b",
    ValueError,
    "thread_id_b=7",
    MX,
    MA,
    MB,
    C4,
    scale_a=SD,
    scale_b=SD,
    thread_id_b=7,
)
case(
    "bs-thread-id-a-bool",
    ValueError,
    "thread_id_a=True",
    MX,
    MA,
    MB,
    C4,
    scale_a=SD,
    scale_b=SD,
    thread_id_a=True,
)
case(
    "bs-byte-id-4x",
    ValueError,
    "byte_id_b=1",
    NV,
    z((32, 4)),
    z((32, 2)),
    C4,
    scale_a=SD,
    scale_b=SD,
    byte_id_b=1,
)
case(
    "bs-scale-batch",
    ValueError,
    r"batch.*scale_a \(2,\)",
    MX,
    MA,
    MB,
    C4,
    scale_a=z((2, 32)),
    scale_b=z((3, 32)),
)

# ---------------------------------------------------------------- wmma
case("wmma-load-mem-int8", TypeError, "mem: expected a uint8", WLD, z((2048,), jnp.int8))
case("wmma-load-mem-scalar", ValueError, "mem: expected shape", WLD, z((), jnp.uint8))
case("wmma-load-addr-negative", ValueError, "addr: -16 is negative", WLD, MEM, -16)
case("wmma-load-addr-misaligned", ValueError, "addr must be 16-byte aligned", WLD, MEM, 8)
case("wmma-load-addr-float", TypeError, "addr: expected an int", WLD, MEM, 1.5, jit=False)
case("wmma-load-addr-bool", TypeError, "addr: expected an int", WLD, MEM, True, jit=False)
case("wmma-load-addr-huge", ValueError, "addr", WLD, MEM, 2**40, jit=False)
case("wmma-load-addr-past-end", ValueError, "outside the 2048-byte image", WLD, MEM, 2048)
case("wmma-load-stride-small", ValueError, "stride: 8 elements is below", WLD, MEM, 0, 8)
case("wmma-load-stride-negative", ValueError, "stride: -16", WLD, MEM, 0, -16)
case("wmma-load-stride-float", TypeError, "stride: expected an int", WLD, MEM, 0, 16.0, jit=False)
case("wmma-load-outside", ValueError, "outside the 2048-byte image", WLD, MEM, 1792, 64)
case("wmma-load-check-str", TypeError, "check", WLD, MEM, check="yes")
case("wmma-store-regs-int32", TypeError, "regs: expected uint32", WST, MEM, z((32, 8), jnp.int32))
case(
    "wmma-store-regs-float32", TypeError, "regs: expected uint32", WST, MEM, z((32, 8), jnp.float32)
)
case("wmma-store-regs-shape", ValueError, r"regs: .*\[\.\.\., 32, 8\]", WST, MEM, z((32, 7)))
case("wmma-store-addr-negative", ValueError, "addr: -1024", WST, MEM, z((32, 8)), -1024)
case(
    "wmma-store-batch",
    ValueError,
    r"batch.*mem \(2,\).*regs \(3,\)",
    WST,
    z((2, 2048), jnp.uint8),
    z((3, 32, 8)),
)
case(
    "wmma-mma-a-int32",
    TypeError,
    "a: expected uint32",
    WMMA,
    z((32, 8), jnp.int32),
    z((32, 8)),
    z((32, 8)),
)
case(
    "wmma-mma-c-shape",
    ValueError,
    r"c: .*\[\.\.\., 32, 8\]",
    WMMA,
    z((32, 8)),
    z((32, 8)),
    z((32, 4)),
)
case("wmma-mma-batch", ValueError, "batch", WMMA, z((2, 32, 8)), z((3, 32, 8)), z((32, 8)))

# ---------------------------------------------------------------- ldmatrix / stmatrix / movmatrix
case("ldmatrix-smem-int32", TypeError, "smem: expected a uint8", LD, z((64,), jnp.int32), ADDRS)
case("ldmatrix-smem-scalar", ValueError, "smem: expected shape", LD, z((), jnp.uint8), ADDRS)
case("ldmatrix-addrs-int32", TypeError, "addrs: expected uint32", LD, SMEM, ADDRS.astype(jnp.int32))
case(
    "ldmatrix-addrs-float", TypeError, "addrs: expected uint32", LD, SMEM, ADDRS.astype(jnp.float32)
)
case(
    "ldmatrix-addrs-shape",
    ValueError,
    r"addrs: expected shape \[\.\.\., 32\]",
    LD,
    SMEM,
    ADDRS[:16],
)
case(
    "ldmatrix-addrs-misaligned",
    ValueError,
    "addrs: lane 0 row address 8",
    LD,
    SMEM,
    ADDRS.at[0].set(8),
    jit=False,
)
case(
    "ldmatrix-addrs-outside",
    ValueError,
    "addrs: lane 0 .*outside",
    LD,
    SMEM,
    ADDRS.at[0].set(256),
    jit=False,
)
case(
    "ldmatrix-addrs-2-31",
    ValueError,
    "addrs: lane 0 .*outside",
    LD,
    SMEM,
    ADDRS.at[0].set(2**31),
    jit=False,
)
case(
    "ldmatrix-addrs-list-negative",
    ValueError,
    "addrs: Python ints",
    LD,
    SMEM,
    [-16] * 32,
    jit=False,
)
case(
    "ldmatrix-batch",
    ValueError,
    r"batch.*smem \(2,\).*addrs \(3,\)",
    LD,
    z((2, 256), jnp.uint8),
    jnp.broadcast_to(ADDRS, (3, 32)),
)
case("ldmatrix-check-int", TypeError, "check", LD, SMEM, ADDRS, check=1)
case("ldmatrix-extra-arg", TypeError, "ldmatrix is called as", LD, SMEM, ADDRS, ADDRS)
case(
    "stmatrix-regs-int32",
    TypeError,
    "regs: expected uint32",
    ST,
    SMEM,
    ADDRS,
    z((32, 1), jnp.int32),
)
case(
    "stmatrix-regs-float32",
    TypeError,
    "regs: expected uint32",
    ST,
    SMEM,
    ADDRS,
    z((32, 1), jnp.float32),
)
case(
    "stmatrix-regs-shape",
    ValueError,
    r"regs: expected shape \[\.\.\., 32, 1\]",
    ST,
    SMEM,
    ADDRS,
    z((32, 2)),
)
case(
    "stmatrix-addrs-outside",
    ValueError,
    "addrs: lane 7 .*outside",
    ST,
    SMEM,
    ADDRS.at[7].set(2**28),
    z((32, 1)),
    jit=False,
)
case("stmatrix-batch", ValueError, "batch", ST, z((2, 256), jnp.uint8), ADDRS, z((3, 32, 1)))
case("movmatrix-int32", TypeError, "a: expected uint32", MOV, z((32,), jnp.int32))
case("movmatrix-shape", ValueError, r"a: expected shape \[\.\.\., 32\]", MOV, z((16,)))
case("movmatrix-two-regs", ValueError, r"a: expected shape \[\.\.\., 32\]", MOV, z((32, 2)))
case("movmatrix-mma", ValueError, "moves data", MOV.mma, z((8, 8)), z((8, 8)), z((8, 8)))

# ---------------------------------------------------------------- ins.mma (matrix level)
case("mma-A-float32", TypeError, "A: expected bfloat16", BF16.mma, AM.astype(jnp.float32), BM, CM)
case("mma-A-int8", TypeError, "A: expected bfloat16", BF16.mma, z((16, 16), jnp.int8), BM, CM)
case(
    "mma-A-uint8",
    TypeError,
    "A: expected bfloat16 or uint16",
    BF16.mma,
    z((16, 16), jnp.uint8),
    BM,
    CM,
)
case("mma-C-float16", TypeError, "C: expected float32", BF16.mma, AM, BM, z((16, 8), jnp.float16))
case("mma-A-shape", ValueError, r"A: expected .* \[16, 16\]", BF16.mma, AM[:, :8], BM, CM)
case(
    "mma-B-transposed",
    ValueError,
    r"B: expected .* \[16, 8\]",
    BF16.mma,
    AM,
    z((8, 16), jnp.bfloat16),
    CM,
)
case("mma-C-shape", ValueError, r"C: expected .* \[16, 8\]", BF16.mma, AM, BM, z((8, 16)))
case("mma-A-vector", ValueError, "A: expected", BF16.mma, z((16,), jnp.bfloat16), BM, CM)
case(
    "mma-matrix-batch",
    ValueError,
    r"batch.*A \(2,\), B \(3,\)",
    BF16.mma,
    z((2, 16, 16), jnp.bfloat16),
    z((3, 16, 8), jnp.bfloat16),
    CM,
)
case("mma-matrix-kwarg", TypeError, "bogus", BF16.mma, AM, BM, CM, bogus=1)
case("mma-matrix-model", ValueError, "model", BF16.mma, AM, BM, CM, model="fast")
case(
    "mma-f64-matrix-no-x64",
    ValueError,
    "jax_enable_x64",
    F64.mma,
    z((8, 4), jnp.float32),
    z((4, 8), jnp.float32),
    z((8, 8), jnp.float32),
)
case(
    "bs-matrix-scale-missing",
    ValueError,
    "scale_a: required",
    MX.mma,
    z((16, 32), jnp.uint8),
    z((32, 8), jnp.uint8),
    CM,
    scale_b=z((1, 8), jnp.uint8),
)
case(
    "bs-matrix-scale-float32",
    TypeError,
    "scale_a: expected uint8",
    MX.mma,
    z((16, 32), jnp.uint8),
    z((32, 8), jnp.uint8),
    CM,
    scale_a=z((16, 1), jnp.float32),
    scale_b=z((1, 8), jnp.uint8),
)
case(
    "bs-matrix-scale-shape",
    ValueError,
    r"scale_b: expected trailing shape \[1, 8\]",
    MX.mma,
    z((16, 32), jnp.uint8),
    z((32, 8), jnp.uint8),
    CM,
    scale_a=z((16, 1), jnp.uint8),
    scale_b=z((8, 1), jnp.uint8),
)
case(
    "sp-matrix-too-many-nonzeros",
    ValueError,
    "A: row 0, chunk 0 .* 4 non-zero",
    SP.mma,
    jnp.ones((16, 32), jnp.float16),
    z((32, 8), jnp.float16),
    CM,
    jit=False,
)
case(
    "sp-matrix-metadata-float",
    TypeError,
    "metadata: expected int32",
    SP.mma,
    z((16, 16), jnp.float16),
    z((32, 8), jnp.float16),
    CM,
    metadata=z((16, 16), jnp.float32),
)
case(
    "sp-matrix-metadata-shape",
    ValueError,
    "metadata: expected int32",
    SP.mma,
    z((16, 16), jnp.float16),
    z((32, 8), jnp.float16),
    CM,
    metadata=z((16, 8), jnp.int32),
)
case(
    "sp-matrix-A-shape",
    ValueError,
    r"A: expected a dense matrix",
    SP.mma,
    z((16, 8), jnp.float16),
    z((32, 8), jnp.float16),
    CM,
)

# ---------------------------------------------------------------- fragment / unfragment
case("fragment-operand", ValueError, "operand must be one of", BF16.fragment, "e", z((16, 16)))
case(
    "fragment-bf16-as-float32",
    TypeError,
    "a: expected bfloat16",
    BF16.fragment,
    "a",
    AM.astype(jnp.float32),
)
case(
    "fragment-int32", TypeError, "a: expected bfloat16", BF16.fragment, "a", z((16, 16), jnp.int32)
)
case(
    "fragment-uint8-too-narrow",
    TypeError,
    "a: expected bfloat16 or uint16",
    BF16.fragment,
    "a",
    z((16, 16), jnp.uint8),
)
case(
    "fragment-c-float16",
    TypeError,
    "c: expected float32",
    BF16.fragment,
    "c",
    z((16, 8), jnp.float16),
)
case(
    "fragment-shape",
    ValueError,
    r"a: expected a matrix of trailing shape \(16, 16\)",
    BF16.fragment,
    "a",
    z((16, 8), jnp.bfloat16),
)
case(
    "fragment-movement", ValueError, "fragment/unfragment apply to mma", LD.fragment, "a", z((8, 8))
)
case(
    "unfragment-int32", TypeError, "a: expected uint32", BF16.unfragment, "a", z((32, 4), jnp.int32)
)
case(
    "unfragment-nregs",
    ValueError,
    r"a: expected registers of shape \[\.\.\., 32, 4\]",
    BF16.unfragment,
    "a",
    z((32, 3)),
)
case("unfragment-operand", ValueError, "operand must be one of", BF16.unfragment, "z", A4)
case("fragment-f64-no-x64", ValueError, "jax_enable_x64", F64.fragment, "a", z((8, 4), jnp.float32))

# ---------------------------------------------------------------- formats
case("decode-fmt", ValueError, "fmt: expected one of", F.decode, "f17", z((4,)))
case("decode-fmt-int", ValueError, "fmt: expected one of", F.decode, 16, z((4,)))
case("decode-bits-float", TypeError, "bits: expected an integer", F.decode, "bf16", X)
case("encode-x-int", TypeError, "x: expected a floating", F.encode, "e4m3", z((4,), jnp.int32))
case("encode-rounding", ValueError, "rounding: expected one of", F.encode, "e4m3", X, rounding="up")
case(
    "encode-stochastic-no-bits",
    ValueError,
    "random_bits: required",
    F.encode,
    "e4m3",
    X,
    rounding="stochastic",
)
case(
    "encode-random-bits-int32",
    TypeError,
    "random_bits: expected uint32",
    F.encode,
    "e4m3",
    X,
    rounding="stochastic",
    random_bits=z((4, 32), jnp.int32),
)
case("encode-f64-no-x64", ValueError, "jax_enable_x64", F.encode, "f64", X)
case(
    "round-to-format-int",
    TypeError,
    "x: expected a floating",
    F.round_to_format,
    "e2m1",
    z((4,), jnp.int32),
)
case("round-to-format-fmt", ValueError, "fmt: expected one of", F.round_to_format, "e9m9", X)
case("fields-fmt", ValueError, "fmt: expected one of", F.fields, "x", z((4,)))
case("get-format", ValueError, "fmt: expected one of", F.get_format, "float8", jit=False)
case("pack-bits", ValueError, "bits_per_elem: expected one of", F.pack, z((8,)), 3)
case("pack-bits-bool", ValueError, "bits_per_elem", F.pack, z((8,)), True)
case("pack-float", TypeError, "elems: expected an unsigned", F.pack, X, 8)
case("pack-length", ValueError, "elems: expected a last axis", F.pack, z((3,)), 8)
case("unpack-bits", ValueError, "bits_per_elem", F.unpack, z((2,)), 5)
case("unpack-float", TypeError, "regs: expected an unsigned", F.unpack, X, 8)
case("unpack-scalar", ValueError, "regs: expected at least one axis", F.unpack, z(()), 8)
case("to-container-fmt", ValueError, "fmt: expected one of", F.to_container, "f16", z((4,)))
case("to-container-float", TypeError, "bits: expected an unsigned", F.to_container, "e2m1", X)
case("from-container-fmt", ValueError, "fmt: expected one of", F.from_container, "bf16", z((4,)))
case("from-container-float", TypeError, "byte: expected an unsigned", F.from_container, "e2m1", X)

# ---------------------------------------------------------------- sparse
DA = z((16, 32), jnp.float16)
case("prune-dense-ins", ValueError, "ins: expected an mma.sp", S.prune, BF16, DA)
case(
    "prune-shape",
    ValueError,
    r"A: expected a dense matrix of trailing shape \[16, 32\]",
    S.prune,
    SP,
    z((16, 16), jnp.float16),
)
case(
    "prune-complex",
    TypeError,
    "A: expected element values",
    S.prune,
    SP,
    z((16, 32), jnp.complex64),
)
case(
    "validate-too-many",
    ValueError,
    "A: row 0, chunk 0",
    S.validate,
    SP,
    jnp.ones((16, 32), jnp.float16),
    jit=False,
)
case("compress-selector", ValueError, "selector=9", S.compress, SP, DA, 9)
case("compress-check-str", TypeError, "check", S.compress, SP, DA, 0, check="no")
case("prune-ins-string", TypeError, "ins: expected an mma.sp", S.prune, "mma.sp", DA)
case("prune-no-ins", TypeError, "ins: expected an mma.sp", S.prune, DA, DA)
case(
    "decompress-values-shape",
    ValueError,
    "values: expected registers",
    S.decompress,
    SP,
    z((16, 8)),
    E_OK,
    0,
)
case(
    "metadata-e-int32",
    TypeError,
    "e: expected uint32",
    S.metadata_indices,
    SP,
    z((32,), jnp.int32),
    0,
)
case("metadata-dense-ins", ValueError, "ins: expected an mma.sp", S.metadata_indices, BF16, E_OK, 0)
case(
    "metadata-selector-traced",
    TypeError,
    "selector must be a static",
    lambda e, s: S.metadata_indices(SP, e, s),
    E_OK,
    jnp.int32(0),
    jit="only",
)
case("checked-enabled-str", TypeError, "enabled", S.checked, "yes", jit=False)

# ---------------------------------------------------------------- quant
case(
    "quantize-mx-int",
    TypeError,
    "x: expected float32",
    Q.quantize_mx,
    z((4, 32), jnp.int32),
    "e4m3",
)
case(
    "quantize-mx-float64-list",
    TypeError,
    "x: expected float32",
    Q.quantize_mx,
    np.full((4, 32), 0.1),  # not exact in float32 (exact doubles pass: docs/dtypes.md)
    "e4m3",
    jit=False,
)
case("quantize-mx-fmt", ValueError, "fmt: expected one of", Q.quantize_mx, X, "e9m9")
case(
    "quantize-mx-block-zero",
    ValueError,
    "block: expected a positive",
    Q.quantize_mx,
    X,
    "e4m3",
    block=0,
)
case(
    "quantize-mx-block-divides",
    ValueError,
    "not a multiple of block=5",
    Q.quantize_mx,
    X,
    "e4m3",
    block=5,
)
case("quantize-mx-axis", ValueError, "axis: 5 is out of range", Q.quantize_mx, X, "e4m3", axis=5)
case(
    "quantize-mx-axis-float",
    ValueError,
    "axis: expected an int",
    Q.quantize_mx,
    X,
    "e4m3",
    axis=1.0,
)
case(
    "quantize-mx-scale-rounding",
    ValueError,
    "scale_rounding: expected one of",
    Q.quantize_mx,
    X,
    "e4m3",
    scale_rounding="up",
)
case(
    "quantize-mx-rounding",
    ValueError,
    "rounding: expected one of",
    Q.quantize_mx,
    X,
    "e4m3",
    rounding="rz",
)
case(
    "quantize-mx-stochastic-no-key",
    ValueError,
    "key",
    Q.quantize_mx,
    X,
    "e4m3",
    rounding="stochastic",
)
case(
    "quantize-nvfp4-global-shape",
    ValueError,
    "global_scale: expected a scalar",
    Q.quantize_nvfp4,
    X,
    global_scale=jnp.ones(2),
)
case("quantize-nvfp4-block", ValueError, "not a multiple of block=7", Q.quantize_nvfp4, X, block=7)
case("dequantize-array", TypeError, "q: expected a Quantized", Q.dequantize, X)
case("shared-exponent-fmt", ValueError, "fmt: expected one of", Q.shared_exponent, X, "f16")
case("as-operands-array", TypeError, "qa: expected a Quantized", Q.as_operands, MX, X, X)


# block-scaled matmul: shapes as given (before a ragged K is padded) and element dtypes
def _mm_block(instruction):
    return lambda A, B: jaxmma.matmul(A, B, instruction=instruction)


for _cid, _ins, _exc, _pat, _a, _b in (
    ("ragged-k-mismatch", MX, ValueError, "A, B: contracting sizes differ: .*K = 40.*K = 50",
     (16, 40), (50, 8)),
    ("k-padded-alike", NV, ValueError, "A, B: contracting sizes differ", (16, 64), (1, 8)),
    ("vector-b", MX, ValueError, "B: expected a matrix", (16, 64), (64,)),
):  # fmt: skip
    case(
        f"matmul-block-scaled-{_cid}",
        _exc,
        _pat,
        _mm_block(_ins),
        jnp.ones(_a, jnp.float32),
        jnp.ones(_b, jnp.float32),
    )
case(
    "matmul-block-scaled-fp8-a",
    TypeError,
    "A: expected a jaxmma.quant.Quantized operand or a float32",
    _mm_block(MX),
    jnp.ones((16, 32), jnp.float8_e4m3fn),
    jnp.ones((32, 8), jnp.float32),
)
# the NVFP4 global scale is a float, never a value cast
for _g in ("0.5", True, np.int32(2), np.uint32(1), jnp.int32(2)):
    case(
        f"quantize-nvfp4-global-{type(_g).__name__}",
        TypeError,
        "global_scale: expected None or a float32 scalar",
        Q.quantize_nvfp4,
        X,
        global_scale=_g,
    )
# stochastic rounding's key is checked and named
for _k, _exc, _pat in (
    (0, TypeError, "key: expected a jax.random key, got dtype int"),
    ("a", TypeError, "key: expected a jax.random key"),
    (np.zeros(3, np.uint32), ValueError, "key: expected one key's uint32 data"),
    (jax.random.split(jax.random.key(0)), ValueError, r"key: expected one key \(shape \(\)\)"),
):
    case(
        f"quantize-mx-key-{type(_k).__name__}",
        _exc,
        _pat,
        Q.quantize_mx,
        X,
        "e4m3",
        rounding="stochastic",
        key=_k,
        jit=False,
    )
case(
    "quantize-nvfp4-key-int",
    TypeError,
    "key: expected a jax.random key",
    Q.quantize_nvfp4,
    X,
    rounding="stochastic",
    key=0,
    jit=False,
)
# shared_exponent's amax is float32 (float16, bfloat16): no value casts
case(
    "shared-exponent-complex",
    TypeError,
    "amax: expected float32",
    Q.shared_exponent,
    jnp.complex64(1 + 1000j),
    "e4m3",
)
case(
    "shared-exponent-int",
    TypeError,
    "amax: expected float32",
    Q.shared_exponent,
    jnp.int32(3),
    "e4m3",
)
case(
    "shared-exponent-str",
    TypeError,
    "amax: expected an array of numbers",
    Q.shared_exponent,
    "a",
    "e4m3",
    jit=False,
)
case(
    "nvfp4-global-scale-str",
    TypeError,
    "x: expected an array of numbers",
    Q.nvfp4_global_scale,
    "a",
    jit=False,
)


@pytest.mark.every_case  # each case is one cheap call: all run in the quick run
@pytest.mark.parametrize(("fn", "args", "kwargs", "exc", "pattern", "jit"), CASES)
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_bad_input_is_refused(fn, args, kwargs, exc, pattern, jit, mode):
    if mode == "eager":
        if jit == "only":
            pytest.skip("a traced-only case")
        call = lambda: fn(*args, **kwargs)  # noqa: E731
    else:
        if not jit:
            pytest.skip("no array argument to trace")
        arrays = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]

        def traced(*xs):
            full = list(args)
            for i, x in zip(arrays, xs, strict=True):
                full[i] = x
            return fn(*full, **kwargs)

        call = lambda: jax.jit(traced)(*(args[i] for i in arrays))  # noqa: E731
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert type(info.value) is exc or issubclass(type(info.value), exc)
    assert "jax" not in type(info.value).__module__, "a JAX-internal exception type"


def test_sweep_size():
    """The issue asks for at least 100 bad inputs across the public API."""
    assert len(CASES) >= 100


def test_deprecated_argument_orders_still_work():
    A = jnp.asarray(np.tile([1.0, -3.0, 2.0, 0.5], (16, 8)), jnp.float16)
    new = S.prune(SP, A)
    with pytest.warns(DeprecationWarning, match=r"prune\(A, ins\) is deprecated"):
        old = S.prune(A, SP)
    np.testing.assert_array_equal(np.asarray(old), np.asarray(new))
    with pytest.warns(DeprecationWarning, match="validate"):
        S.validate(new, SP)
    with pytest.warns(DeprecationWarning, match="compress"):
        a, e = S.compress(new, SP, 0)
    with pytest.warns(DeprecationWarning, match="decompress"):
        dense = S.decompress(a, e, SP, 0)
    np.testing.assert_array_equal(
        np.asarray(dense), np.asarray(jax.lax.bitcast_convert_type(new, jnp.uint16))
    )


def test_quantized_operand_mismatch():
    q = Q.quantize_mx(jnp.ones((16, 32), jnp.float32), "e5m2", block=32)
    qb = Q.quantize_mx(jnp.ones((32, 8), jnp.float32), "e4m3", axis=-2, block=32)
    with pytest.raises(ValueError, match="qa: the quantized operand does not fit.*e4m3"):
        Q.as_operands(MX, q, qb)


# --- issue 20: x64, dtype rule, crashes, arguments that do not apply ---
# (docs/dtypes.md states the rule these cases check)
ISSUE20: list = []
_E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
_DN = ((1,), (0,)), ((), ())


def case20(cid, exc, pattern, fn, *args, jit=True, **kwargs):
    ISSUE20.append(pytest.param(fn, args, kwargs, exc, pattern, jit, id=cid))


def _matmul(A, B, **kw):
    return jaxmma.matmul(A, B, instruction=BF16, **kw)


def _dot(lhs, rhs, dn=_DN, **kw):
    return jaxmma.dot_general(lhs, rhs, dn, instruction=BF16, **kw)


# 4. one dtype rule
case20(
    "encode-stochastic-inexact-double",
    TypeError,
    "x: the float64 value 0.1 ",
    F.encode,
    "e4m3",
    np.full(4, 0.1),
    rounding="stochastic",
    random_bits=np.zeros(4, np.uint32),
    jit=False,
)
case20(
    "encode-s32-inexact-double-float32-cannot-hold",
    TypeError,
    "x: the float64 value",
    F.encode,
    "s32",
    np.float64(2**30 + 1.25),
    jit=False,
)
case20(
    "matmul-uint8-bits-for-bf16",
    TypeError,
    "A: unsigned raw bits .*at least 16 bits",
    _matmul,
    z((16, 16), jnp.uint8),
    z((16, 8), jnp.bfloat16),
)
case20(
    "matmul-uint8-bits-for-bf16-B",
    TypeError,
    "B: unsigned raw bits",
    _matmul,
    z((16, 16), jnp.bfloat16),
    z((16, 8), jnp.uint8),
)
case20(
    "registers-numpy-uint64-high-bits",
    ValueError,
    "a: uint64 values .*32-bit",
    BF16,
    np.full((32, 4), 2**40 + 1, np.uint64),
    B2,
    C4,
    jit=False,
)
case20(
    "unfragment-numpy-uint64-high-bits",
    ValueError,
    "c: uint64 values",
    BF16.unfragment,
    "c",
    np.full((32, 4), 2**33, np.uint64),
    jit=False,
)
case20(
    "decode-python-int-too-wide",
    ValueError,
    "bits: Python ints are 32-bit words",
    F.decode,
    "f32",
    2**40,
    jit=False,
)
case20(
    "decode-negative-python-int", ValueError, "bits: Python ints", F.decode, "bf16", -1, jit=False
)
case20(
    "decode-numpy-uint64-too-wide",
    ValueError,
    "bits: values are 32-bit words",
    F.decode,
    "f32",
    np.array([1, 2**40], np.uint64),
    jit=False,
)
for _bad in (1.5, True, "1", None):
    case20(
        f"dot-general-dimension-{_bad!r}",
        ValueError,
        "dimension_numbers: .*int",
        _dot,
        X,
        z((32, 8), jnp.float32),
        (((_bad,), (0,)), ((), ())),
    )
case20(
    "dot-general-batch-dimension-bool",
    ValueError,
    "dimension_numbers",
    _dot,
    z((2, 4, 32), jnp.float32),
    z((2, 32, 8), jnp.float32),
    (((2,), (1,)), ((False,), (0,))),
)
case20(
    "quantize-mx-saturate-string",
    TypeError,
    "saturate: expected True or False",
    Q.quantize_mx,
    X,
    "e4m3",
    saturate="no",
)
case20(
    "quantize-mx-saturate-int",
    TypeError,
    "saturate: expected True or False",
    Q.quantize_mx,
    X,
    "e4m3",
    saturate=1,
)
case20(
    "quantize-nvfp4-saturate-string",
    TypeError,
    "saturate: expected True or False",
    Q.quantize_nvfp4,
    X,
    saturate="yes",
)
case20(
    "all-instructions-bogus",
    ValueError,
    "opcode: expected None or one of mma",
    jaxmma.all_instructions,
    "bogus",
    jit=False,
)
case20(
    "all-instructions-mma-sp",
    ValueError,
    "opcode: .*wgmma.mma_async",
    jaxmma.all_instructions,
    "mma.sp",
    jit=False,
)
case20(
    "fragment-bits-above-the-element",
    ValueError,
    "a: raw bits .*16-bit elements",
    BF16.fragment,
    "a",
    np.full((16, 16), 0x12345, np.uint32),
    jit=False,
)
case20(
    "fragment-bits-above-the-element-jax",
    ValueError,
    "b: raw bits",
    BF16.fragment,
    "b",
    jnp.full((16, 8), 0x10000, U32),
    jit=False,
)

# 5. no crash inside JAX or NumPy
_OBJ = np.array([[object()] * 16] * 16)
case20(
    "matmul-object-array",
    TypeError,
    "A: expected a numeric array",
    _matmul,
    _OBJ,
    z((16, 8), jnp.bfloat16),
    jit=False,
)
case20(
    "matmul-string-array-C",
    TypeError,
    "C: expected a numeric array",
    _matmul,
    AM,
    BM,
    C=np.full((16, 8), "x"),
    jit=False,
)
case20(
    "dot-general-object-array",
    TypeError,
    "rhs: expected a numeric array",
    _dot,
    X,
    np.array([[object()] * 8] * 32),
    jit=False,
)
case20(
    "mma-object-array", TypeError, "A: expected a numeric array", BF16.mma, _OBJ, BM, CM, jit=False
)
case20(
    "register-object-array",
    TypeError,
    "b: expected a numeric array",
    BF16,
    A4,
    np.array([[object()] * 2] * 32),
    C4,
    jit=False,
)
case20(
    "encode-random-bits-shape",
    ValueError,
    "random_bits: expected a shape that broadcasts",
    F.encode,
    "e4m3",
    jnp.ones((4, 4)),
    rounding="stochastic",
    random_bits=jnp.zeros((3,), U32),
)
case20(
    "dot-general-preferred-foo",
    TypeError,
    "preferred_element_type: expected None or a dtype",
    _dot,
    X,
    z((32, 8), jnp.float32),
    preferred_element_type="foo",
)
case20(
    "instruction-list-text",
    TypeError,
    "text: expected a str",
    jaxmma.instruction,
    [BF16.text],
    jit=False,
)
case20(
    "instruction-list-arch",
    TypeError,
    "arch: expected None or a str",
    jaxmma.instruction,
    BF16.text,
    arch=["sm_90"],
    jit=False,
)
case20(
    "matmul-list-arch", TypeError, "arch: expected None or a str", _matmul, AM, BM, arch=["sm_90"]
)
case20(
    "matmul-list-instruction",
    TypeError,
    "instruction: expected PTX text",
    jaxmma.matmul,
    AM,
    BM,
    instruction=[BF16.text],
)
for _p in (0, -3, 1.5, True, "4"):
    _exc = ValueError if isinstance(_p, int) and not isinstance(_p, bool) else TypeError
    case20(
        f"promote-every-{_p!r}",
        _exc,
        "promote_every",
        jaxmma.matmul,
        X,
        z((32, 8), jnp.float32),
        instruction=_E4M3,
        promote_every=_p,
    )

case20(
    "matmul-block-scaled-inexact-double",
    TypeError,
    "A: expected float32",
    jaxmma.matmul,
    np.full((16, 32), 0.1),
    np.ones((32, 8)),
    instruction=MX,
    jit=False,
)
case20(
    "dot-general-block-scaled-inexact-double",
    TypeError,
    "rhs: expected float32",
    jaxmma.dot_general,
    np.ones((16, 32)),
    np.full((32, 8), 0.1),
    _DN,
    instruction=MX,
    jit=False,
)

# 6. arguments that do not apply are refused at the matrix level too
case20(
    "mma-dense-scale_a",
    ValueError,
    "scale_a: operands of .block_scale forms",
    BF16.mma,
    AM,
    BM,
    CM,
    scale_a=z((16, 1)),
)
case20(
    "mma-dense-scale_b",
    ValueError,
    "scale_b: operands of .block_scale forms",
    BF16.mma,
    AM,
    BM,
    CM,
    scale_b=z((1, 8)),
)
case20(
    "mma-dense-metadata",
    ValueError,
    "metadata: operands of mma.sp only",
    BF16.mma,
    AM,
    BM,
    CM,
    metadata=z((16, 8), jnp.int32),
)
case20(
    "mma-dense-check",
    ValueError,
    "check: operands of mma.sp only",
    BF16.mma,
    AM,
    BM,
    CM,
    check=True,
)
case20(
    "mma-dense-check-false",
    ValueError,
    "check: operands of mma.sp only",
    BF16.mma,
    AM,
    BM,
    CM,
    check=False,
)
case20(
    "wmma-mma-dense-scale_a",
    TypeError,
    "scale_a",
    WMMA.mma,
    z((16, 16), jnp.float32),
    z((16, 16), jnp.float32),
    z((16, 16), jnp.float32),
    scale_a=z((16, 1)),
)


@pytest.mark.parametrize(("fn", "args", "kwargs", "exc", "pattern", "jit"), ISSUE20)
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_issue20_bad_input_is_refused(fn, args, kwargs, exc, pattern, jit, mode):
    test_bad_input_is_refused(fn, args, kwargs, exc, pattern, jit, mode)


# op by op (float64 inputs); test_x64 checks the doubles' rounding in the quick run
@pytest.mark.full
def test_issue20_a_double_is_rounded_once():
    """1 + 2**-8 + 2**-30 lies above the bf16 tie 1 + 2**-8: to nearest it is 0x3F81, and
    1.0078125 in every product with 1; through float32 (the tie) it would be 0x3F80."""
    v = 1 + 2**-8 + 2**-30
    for x in (v, np.float64(v), np.array([v]), [v]):
        assert np.asarray(F.encode("bf16", x)).tolist() in (0x3F81, [0x3F81])
    assert int(F.encode("e4m3", np.float64(1 + 2**-4 + 2**-40))) == 0x39  # above the tie
    assert int(F.encode("e4m3", np.float64(1 + 2**-4 - 2**-40))) == 0x38
    assert float(F.round_to_format("bf16", v)) == 1.0078125
    A = np.full((16, 16), v)  # float64
    eye = np.eye(16)[:, :8]
    assert np.all(np.asarray(_matmul(A, eye)) == 1.0078125)
    assert np.all(np.asarray(_dot(A, eye)) == 1.0078125)
    assert np.all(np.asarray(_matmul(A.astype(np.float32), eye.astype(np.float32))) == 1.0)
    # doubles that float32 holds exactly pass everywhere, the quantizers included
    q = Q.quantize_mx(np.ones((4, 32)), "e4m3")
    assert np.all(np.asarray(Q.dequantize(q)) == 1.0)
    D = jaxmma.matmul(np.full((16, 32), 0.5), np.full((32, 8), 2.0), instruction=MX)
    assert np.all(np.asarray(D) == 32.0)


def test_issue20_numpy_uint64_registers_are_taken_exactly():
    regs = np.full((32, 4), 0x3F803F80, np.uint64)  # bf16 pairs of 1.0, values below 2**32
    A = np.asarray(BF16.unfragment("a", regs))
    assert A.dtype == np.uint32 and np.all(A == 0x3F80)


def test_issue20_traced_bits_above_the_element_are_dropped():
    """docs/dtypes.md: ins.fragment cannot inspect traced raw bits; bits above the
    element's 16 are dropped (0x12345 -> 0x2345)."""
    regs = jax.jit(lambda m: BF16.fragment("a", m))(jnp.full((16, 16), 0x12345, U32))
    assert np.all(np.asarray(regs) == 0x23452345)


@pytest.mark.parametrize("P", [3_000_000, 2**40])
def test_issue20_huge_promote_every_is_one_group(P):
    """P at least the number of k-steps (here 64 / 32 = 2) is one group: the same bits as
    P = 2, computed without a P-sized loop."""
    rng = np.random.default_rng(0)
    A = jnp.asarray(rng.standard_normal((16, 64), np.float32))
    B = jnp.asarray(rng.standard_normal((64, 8), np.float32))
    C = jnp.asarray(rng.standard_normal((16, 8), np.float32))
    want = jaxmma.matmul(A, B, C, instruction=_E4M3, arch="sm_90", promote_every=2)
    got = jaxmma.matmul(A, B, C, instruction=_E4M3, arch="sm_90", promote_every=P)
    assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def test_issue20_zero_size_batches_give_empty_results():
    assert BF16.unfragment("a", z((0, 32, 4))).shape == (0, 16, 16)
    assert BF16.fragment("a", z((0, 16, 16), jnp.bfloat16)).shape == (0, 32, 4)
    q = Q.quantize_mx(z((0, 64), jnp.float32), "e4m3")
    assert q.elements.shape == (0, 64) and q.scales.shape == (0, 2)
    q = Q.quantize_nvfp4(z((0, 64), jnp.float32))
    assert q.elements.shape == (0, 64) and q.scales.shape == (0, 4)
    assert _matmul(z((0, 16, 16), jnp.bfloat16), BM).shape == (0, 16, 8)


def test_issue20_a_long_text_is_not_echoed_whole():
    for text in ("x" * 10**6, "mma." + "q" * 10**6, BF16.text + ".row" * 10**5):
        with pytest.raises(ValueError) as info:
            jaxmma.instruction(text)
        assert len(str(info.value)) < 1000 and "characters)" in str(info.value)


# --- issue 20: jit-time checks and Quantized validation ---
# Traced values cannot be checked when the program is built. Without a check, a sparse A
# that lacks the structure (or metadata that no nibble expresses) poisons its rows of D:
# the canonical NaN of the output format, -2**31 for .s32; every other row keeps its
# bits. With check=True the compiled program raises our message when it runs (JAX
# reports it as a JaxRuntimeError whose text ends with "ValueError: <message>").
SP_F32 = "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"
SP_F16 = "mma.sp.sync.aligned.m16n8k32.row.col.f16.f16.f16.f16"
SP_S32 = "mma.sp.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"
RUNTIME = jax.errors.JaxRuntimeError


def _structured(rng, M, K, dtype):
    """A dense [M, K] of small integers with 2 non-zeros (columns 4c and 4c + 2) per 4."""
    A = np.zeros((M, K))
    A[:, 0::4] = rng.integers(-3, 4, (M, K // 4))
    A[:, 2::4] = rng.integers(-3, 4, (M, K // 4))
    return A.astype(dtype)


def _small(rng, shape, dtype):
    return rng.integers(-3, 4, shape).astype(dtype)


def _f32_bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def test_issue20_matmul_sparse_traced_unstructured_rows_are_nan():
    rng = np.random.default_rng(20)
    A = _structured(rng, 20, 64, np.float16)  # ragged M, two k-steps
    B = _small(rng, (64, 8), np.float16)
    A[3, 36:40] = 1  # row 3: four non-zeros in chunk 9 (second k-step)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    with pytest.raises(ValueError, match=r"A\[0, 1\]: row 3, chunk 1 .* 4 non-zero"):
        jaxmma.matmul(A, B, instruction=SP_F32)  # concrete: refused at once
    got = np.asarray(jax.jit(lambda a: jaxmma.matmul(a, B, instruction=SP_F32))(A))
    assert (_f32_bits(got[3]) == 0x7FFFFFFF).all()
    keep = np.arange(20) != 3
    np.testing.assert_array_equal(got[keep], ref[keep].astype(np.float32))
    # promotion and a C: the poisoned row stays NaN, the others exact
    C = _small(rng, (20, 8), np.float32)
    f = jax.jit(lambda a: jaxmma.matmul(a, B, C, instruction=SP_F32, promote_every=1))
    got = np.asarray(f(A))
    assert (_f32_bits(got[3]) == 0x7FFFFFFF).all()
    np.testing.assert_array_equal(got[keep], (ref + C)[keep].astype(np.float32))


def test_issue20_matmul_sparse_poison_for_f16_and_s32_outputs():
    rng = np.random.default_rng(21)
    A = _structured(rng, 16, 32, np.float16)
    A[7, :4] = 2
    B = _small(rng, (32, 8), np.float16)
    got = np.asarray(jax.jit(lambda a: jaxmma.matmul(a, B, instruction=SP_F16))(A))
    assert got.dtype == np.float16
    assert (got[7].view(np.uint16) == 0x7FFF).all()
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(np.delete(got, 7, 0), np.delete(ref, 7, 0))
    Ai = _structured(rng, 16, 32, np.int8)
    Ai[0, 8:12] = [1, -1, 1, -1]
    Bi = _small(rng, (32, 8), np.int8)
    got = np.asarray(jax.jit(lambda a: jaxmma.matmul(a, Bi, instruction=SP_S32))(Ai))
    assert got.dtype == np.int32
    assert (got[0] == -(2**31)).all()
    ref = Ai.astype(np.int64) @ Bi.astype(np.int64)
    np.testing.assert_array_equal(got[1:], ref[1:])


def test_issue20_matmul_sparse_under_vmap_poisons_only_the_bad_element():
    rng = np.random.default_rng(22)
    A = np.stack([_structured(rng, 16, 32, np.float16) for _ in range(3)])
    A[1, 9, 28:32] = 1
    B = _small(rng, (32, 8), np.float16)
    got = np.array(jax.jit(jax.vmap(lambda a: jaxmma.matmul(a, B, instruction=SP_F32)))(A))
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    assert (_f32_bits(got[1, 9]) == 0x7FFFFFFF).all()
    got[1, 9] = ref[1, 9]
    np.testing.assert_array_equal(got, ref)


def test_issue20_matmul_check_true_raises_under_jit():
    rng = np.random.default_rng(23)
    A = _structured(rng, 16, 32, np.float16)
    B = _small(rng, (32, 8), np.float16)
    f = jax.jit(lambda a: jaxmma.matmul(a, B, instruction=SP_F32, check=True))
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(f(A)), ref)  # valid: runs, exact
    A[0, :4] = 1
    with pytest.raises(RUNTIME, match=r"ValueError: A\[0, 0\]: row 0, chunk 0 .* 4 non-zero"):
        f(A)
        jax.effects_barrier()  # a GPU reports host-callback errors here
    with pytest.raises(ValueError, match=r"A\[0, 0\]: row 0, chunk 0"):
        jaxmma.matmul(A, B, instruction=SP_F32, check=True)  # eager: at once
    dg = jax.jit(
        lambda a: jaxmma.dot_general(a, B, (((1,), (0,)), ((), ())), instruction=SP_F32, check=True)
    )
    with pytest.raises(RUNTIME, match=r"ValueError: A\[0, 0\]: row 0, chunk 0"):
        dg(A)
        jax.effects_barrier()  # a GPU reports host-callback errors here


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_issue20_matmul_check_argument_is_validated(mode):
    A, B = jnp.zeros((16, 32), jnp.float16), jnp.zeros((32, 8), jnp.float16)
    wrap = jax.jit if mode == "jit" else (lambda f: f)
    with pytest.raises(TypeError, match="check: expected None, True or False, got 'yes'"):
        wrap(lambda a: jaxmma.matmul(a, B, instruction=SP_F32, check="yes"))(A)
    dense = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    with pytest.raises(ValueError, match="check: only sparse"):
        wrap(lambda a: jaxmma.matmul(a, B, instruction=dense, check=True))(A)


@pytest.mark.parametrize("value", [99, -5, 2])
def test_issue20_ins_mma_metadata_out_of_range_traced(value):
    """idx = 99 / -5 give NaN / a plausible number before; 2 is a column of chunk 0 given
    for chunk 1 (also invalid). Now: NaN in that row, the others exact."""
    ins = jaxmma.instruction(SP_F32)
    rng = np.random.default_rng(24)
    Ac = _small(rng, (16, 16), np.float16)
    B = _small(rng, (32, 8), np.float16)
    C = _small(rng, (16, 8), np.float32)
    idx = np.tile(np.array([[4 * c, 4 * c + 2] for c in range(8)]).reshape(-1), (16, 1))
    ref = np.einsum("mj,mjn->mn", Ac.astype(np.float64), B.astype(np.float64)[idx]) + C
    bad = idx.copy()
    bad[5, 2:4] = value
    with pytest.raises(ValueError, match="metadata: row 5, chunk 1"):
        ins.mma(Ac, B, C, metadata=jnp.asarray(bad, jnp.int32))
    f = jax.jit(lambda i: ins.mma(Ac, B, C, metadata=i))
    got = np.asarray(f(jnp.asarray(bad, jnp.int32)))
    assert (_f32_bits(got[5]) == 0x7FFFFFFF).all()
    keep = np.arange(16) != 5
    np.testing.assert_array_equal(got[keep], ref[keep].astype(np.float32))
    g = jax.jit(lambda i: ins.mma(Ac, B, C, metadata=i, check=True))
    np.testing.assert_array_equal(np.asarray(g(jnp.asarray(idx, jnp.int32))), ref)
    with pytest.raises(RUNTIME, match=r"ValueError: metadata: row 5, chunk 1 has dense columns"):
        g(jnp.asarray(bad, jnp.int32))
        jax.effects_barrier()  # a GPU reports host-callback errors here


def test_issue20_ins_mma_dense_sparse_a_traced():
    ins = jaxmma.instruction(SP_F32)
    rng = np.random.default_rng(25)
    A = _structured(rng, 16, 32, np.float16)
    A[11, 16:20] = 3
    B = _small(rng, (32, 8), np.float16)
    C = np.zeros((16, 8), np.float32)
    got = np.asarray(jax.jit(lambda a: ins.mma(a, B, C))(A))
    assert (_f32_bits(got[11]) == 0x7FFFFFFF).all()
    ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.delete(got, 11, 0), np.delete(ref, 11, 0))
    with pytest.raises(RUNTIME, match=r"ValueError: A: row 11, chunk 4 .* 4 non-zero"):
        jax.jit(lambda a: ins.mma(a, B, C, check=True))(A)
        jax.effects_barrier()  # a GPU reports host-callback errors here


def test_issue20_register_level_check_under_plain_jit():
    E_BAD = jnp.full((32,), 0x44444441, U32)  # nibble 0b0001: descending, undefined
    f = jax.jit(lambda e: SP(SPA, SPB, C4, e, selector=0, check=True))
    np.testing.assert_array_equal(
        np.asarray(f(E_OK)), np.asarray(SP(SPA, SPB, C4, E_OK, selector=0))
    )
    with pytest.raises(RUNTIME, match=r"ValueError: invalid sparse metadata .*e: lane 0, nibble 0"):
        f(E_BAD)
        jax.effects_barrier()  # a GPU reports host-callback errors here
    with pytest.raises(RUNTIME, match="addrs: an address lies outside"):
        jax.jit(lambda a: LD(SMEM, a, check=True))(jnp.full((32,), 4096, U32))
        jax.effects_barrier()  # a GPU reports host-callback errors here


# Quantized containers are validated wherever they enter: an edited one is refused.
@functools.cache
def _nv_pair():
    qa = Q.quantize_nvfp4(jnp.ones((16, 64), jnp.float32))
    qb = Q.quantize_nvfp4(jnp.ones((64, 8), jnp.float32), axis=-2)
    return qa, qb


@functools.cache
def _edits():
    """The edited containers by name (built on first use, not while collecting)."""
    import dataclasses

    qa, _ = _nv_pair()
    f8 = jax.lax.bitcast_convert_type(qa.scales, jnp.float8_e4m3fn)
    r = dataclasses.replace
    return [
        (
            "scales-fewer",
            r(qa, scales=qa.scales[:, :2]),
            ValueError,
            r"Quantized\.scales has shape \(16, 2\)",
        ),
        (
            "scales-more",
            r(qa, scales=jnp.tile(qa.scales, (1, 2))),
            ValueError,
            r"scales has shape \(16, 8\)",
        ),
        ("scales-rows", r(qa, scales=qa.scales[:3]), ValueError, r"scales has shape \(3, 4\)"),
        (
            "scales-float8",
            r(qa, scales=f8),
            TypeError,
            "Quantized.scales must be uint8.*float8_e4m3fn",
        ),
        ("scales-uint32", r(qa, scales=qa.scales.astype(U32)), TypeError, "scales must be uint8"),
        (
            "elements-int8",
            r(qa, elements=qa.elements.astype(jnp.int8)),
            TypeError,
            "elements must be uint8",
        ),
        (
            "global-vector",
            r(qa, global_scale=jnp.ones(3, jnp.float32)),
            ValueError,
            r"global_scale has shape \(3,\)",
        ),
        (
            "global-rows",
            r(qa, global_scale=jnp.ones(16, jnp.float32)),
            ValueError,
            r"global_scale has shape \(16,\)",
        ),
        (
            "global-f16",
            r(qa, global_scale=jnp.float16(1)),
            TypeError,
            "global_scale must be None or a float32",
        ),
        (
            "global-python",
            r(qa, global_scale=1.0),
            TypeError,
            "global_scale must be None or a float32",
        ),
        ("block-edited", r(qa, block=3), ValueError, "not a multiple of block=3"),
        ("axis-positive", r(qa, axis=1), ValueError, r"Quantized\.axis=1"),
        ("fmt-edited", r(qa, fmt="e9m9"), ValueError, r"Quantized\.fmt='e9m9'"),
    ]


EDITS = [
    "scales-fewer", "scales-more", "scales-rows", "scales-float8", "scales-uint32",
    "elements-int8", "global-vector", "global-rows", "global-f16", "global-python",
    "block-edited", "axis-positive", "fmt-edited",
]  # fmt: skip
NV_TEXT = NV.text


def test_every_edit_is_checked():
    assert [e[0] for e in _edits()] == EDITS


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("edit", EDITS)
def test_issue20_edited_quantized_is_refused(edit, mode):
    _, bad, exc, pattern = next(e for e in _edits() if e[0] == edit)
    _, qb = _nv_pair()
    wrap = jax.jit if mode == "jit" and edit != "global-python" else (lambda f: f)
    entries = [
        ("A", lambda q: jaxmma.matmul(q, qb, instruction=NV_TEXT)),
        ("lhs|A", lambda q: jaxmma.dot_general(q, qb, (((1,), (0,)), ((), ())), instruction=NV)),
        ("A", lambda q: NV.mma(q, qb, jnp.zeros((16, 8), jnp.float32))),
        ("qa", lambda q: Q.as_operands(NV, q, qb)),
        ("q", Q.dequantize),
        ("q", Q.raw_bits),
    ]
    fit = {  # edits of the static fields: the instruction's entries name the mismatch first
        "block-edited": "block 16, got 3",
        "axis-positive": "axis -1, got 1",
        "fmt-edited": "element format 'e2m1', got 'e9m9'",
    }
    for name, fn in entries:
        if name.startswith("lhs"):
            continue  # dot_general takes arrays: a Quantized goes through matmul
        if edit == "global-rows" and name == "q":
            wrap(fn)(bad)  # one global scale per row (vmap over rows): a valid container
            continue
        want = (
            fit[edit]
            if edit in fit and name in ("A", "qa") and fn is not entries[0][1]
            else pattern
        )
        with pytest.raises(exc, match=f"^{name}: .*{want}"):
            wrap(fn)(bad)


@pytest.mark.parametrize("g", [-1.0, 0.0, -0.0, float("nan"), float("inf"), float("-inf")])
def test_issue20_quantize_nvfp4_global_scale_values(g):
    x = jnp.asarray(np.linspace(-3, 3, 64).reshape(2, 32), jnp.float32)
    with pytest.raises(ValueError, match=r"global_scale: expected a positive finite .*got"):
        Q.quantize_nvfp4(x, global_scale=g)
    with pytest.raises(ValueError, match="global_scale: expected a positive finite"):
        Q.quantize_nvfp4(x, global_scale=np.float32(g))
    # traced: cannot be checked; every scale is NaN (0x7F), every element +0 -> all NaN
    q = jax.jit(lambda s: Q.quantize_nvfp4(x, global_scale=s))(jnp.float32(g))
    assert (np.asarray(q.scales) == 0x7F).all()
    assert (np.asarray(q.elements) == 0).all()
    assert np.isnan(np.asarray(Q.dequantize(q))).all()
    # a valid traced scale keeps the recipe's bits: 1.0 gives e2m1 grid values directly
    ok = jax.jit(lambda s: Q.quantize_nvfp4(x, global_scale=s))(jnp.float32(1.0))
    assert (np.asarray(ok.scales) != 0x7F).all()


def test_issue20_vmapped_quantized_is_still_accepted():
    X = jnp.asarray(np.arange(3 * 16 * 64).reshape(3, 16, 64) % 7 - 3, jnp.float32)
    q = jax.vmap(Q.quantize_nvfp4)(X)
    assert q.global_scale.shape == (3,)
    got = np.asarray(Q.dequantize(q))
    for i in range(3):
        np.testing.assert_array_equal(got[i], np.asarray(Q.dequantize(Q.quantize_nvfp4(X[i]))))


# Randomized: generated shapes and dtypes give a result equal to an independent NumPy
# reference, or a ValueError/TypeError; never another exception, never another result.
# Values are small integers (or, for quantization, values every format holds exactly), so
# the references are exact.
_RANDOM_FORMS = {
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": ("float", np.float32),
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32": ("int", np.int32),
}
_DTYPES = [
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int32",
    "uint8",
    "bool",
    "complex64",
]
_ML = {
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "e3m2": "float6_e3m2fn",
    "e2m3": "float6_e2m3fn",
    "e2m1": "float4_e2m1fn",
    "ue8m0": "float8_e8m0fnu",
    "ue4m3": "float8_e4m3fn",
}


def _operand(rng, shape, dtype):
    """Small integers in ``dtype`` (0..3 for unsigned and bool, -3..3 otherwise) and the
    same values as int64."""
    unsigned = np.dtype(jnp.dtype(dtype)).kind in "ub"
    v = rng.integers(0 if unsigned else -3, 2 if dtype == "bool" else 4, shape)
    return np.asarray(v).astype(jnp.dtype(dtype)), v.astype(np.int64)


def _allowed(fn):
    """fn() or None when it raises ValueError/TypeError (any other exception fails)."""
    try:
        return fn()
    except (ValueError, TypeError):
        return None


def _np_dequantize(q):
    """element * scale * global_scale in float64, decoded by ml_dtypes (not by jaxmma)."""
    import ml_dtypes

    def values(bits, fmt):
        return np.asarray(bits, np.uint8).view(getattr(ml_dtypes, _ML[fmt])).astype(np.float64)

    e = values(q.elements, q.fmt)
    s = np.repeat(values(q.scales, q.scale_fmt), q.block, axis=q.axis)
    g = 1.0 if q.global_scale is None else float(np.asarray(q.global_scale))
    return e * s * g


def _random_settings(n):
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _strategies():
    from hypothesis import given
    from hypothesis import strategies as st

    return given, st


_given, _st = _strategies()


@_random_settings(8)
@_given(
    form=_st.sampled_from(sorted(_RANDOM_FORMS)),
    dims=_st.tuples(_st.integers(1, 20), _st.integers(1, 12), _st.integers(1, 40)),
    batch=_st.sampled_from([(), (2,)]),
    dtypes=_st.tuples(*[_st.sampled_from(_DTYPES)] * 2),
    api=_st.sampled_from(["matmul", "dot_general"]),
    seed=_st.integers(0, 2**16),
)
def test_issue20_random_gemm_is_exact_or_refused(form, dims, batch, dtypes, api, seed):
    kind, out = _RANDOM_FORMS[form]
    if kind == "float" and "uint8" in dtypes:
        dtypes = tuple("float32" if d == "uint8" else d for d in dtypes)  # raw bits: no values
    rng = np.random.default_rng(seed)
    M, N, K = dims
    A, va = _operand(rng, batch + (M, K), dtypes[0])
    B, vb = _operand(rng, (K, N), dtypes[1])
    if api == "matmul":
        got = _allowed(lambda: jaxmma.matmul(A, B, instruction=form))
    else:  # A transposed: contract lhs axis -2 with rhs axis 0
        At = np.swapaxes(A, -1, -2)
        dn = (((At.ndim - 2,), (0,)), ((), ()))
        got = _allowed(lambda: jaxmma.dot_general(At, B, dn, instruction=form))
    if got is None:
        return
    ref = np.matmul(va, vb).astype(out)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(np.asarray(got), ref)


@_random_settings(8)
@_given(
    nvfp4=_st.booleans(),
    fmt=_st.sampled_from(["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"]),
    shape=_st.lists(_st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    axis=_st.integers(-4, 3),
    block=_st.sampled_from([1, 2, 3, 4, 16, 32]),
    fit=_st.booleans(),
    dtype=_st.sampled_from(["float32", "float16", "bfloat16", "float64", "int32"]),
    seed=_st.integers(0, 2**16),
)
def test_issue20_random_quantize_is_exact_or_refused(
    nvfp4, fmt, shape, axis, block, fit, dtype, seed
):
    if fit and -len(shape) <= axis < len(shape):  # mostly blocks that fit the axis
        shape = tuple(n * block if i == axis % len(shape) else n for i, n in enumerate(shape))
    rng = np.random.default_rng(seed)
    sign = rng.choice([-1.0, 1.0], shape)
    if nvfp4:  # global scale 1: blocks of {0, 1.5, 3, 6} * 2**j have exact ue4m3 scales
        x = rng.choice([0.0, 1.5, 3.0, 6.0], shape) * sign * 2.0 ** rng.integers(-2, 3)
        call = lambda: Q.quantize_nvfp4(x.astype(dtype), axis=axis, block=block, global_scale=1.0)  # noqa: E731
    else:  # {0, 1, 2, 4} * 2**j: after a power-of-two scale every format holds these
        x = rng.choice([0.0, 1.0, 2.0, 4.0], shape) * sign * 2.0 ** rng.integers(-3, 4)
        call = lambda: Q.quantize_mx(x.astype(dtype), fmt, axis=axis, block=block)  # noqa: E731
    q = _allowed(call)
    if q is None:
        return
    np.testing.assert_array_equal(_np_dequantize(q), x)


def test_issue20_check_true_under_grad():
    ins = jaxmma.instruction(SP_F32)
    A = np.zeros((16, 32), np.float32)
    A[:, 0::4], A[:, 2::4] = 1.0, 2.0
    B = jnp.ones((32, 8), jnp.float16)
    C = jnp.zeros((16, 8), jnp.float32)

    def loss(a):
        return jnp.sum(ins.mma(a.astype(jnp.float16), B, C, check=True))

    grad = jax.jit(jax.grad(loss))
    np.testing.assert_array_equal(np.asarray(grad(A)), np.full((16, 32), 8.0, np.float32))
    A[2, 4:8] = 1.0
    with pytest.raises(RUNTIME, match=r"ValueError: A: row 2, chunk 1 .* 4 non-zero"):
        grad(A)
        jax.effects_barrier()  # a GPU reports host-callback errors here
