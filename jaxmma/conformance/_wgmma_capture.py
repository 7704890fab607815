"""Capture ``wgmma.mma_async`` outputs on an sm_90a GPU (H100/H200) as golden files.

``python -m jaxmma.conformance._wgmma_capture OUT_DIR`` (needs ``nvcc``, CuPy and a GPU).

One kernel per (form, imm-scale-a/b): a block is one warpgroup (128 threads). The block
copies its A (64 x K) and B (K x N) images into shared memory, in the no-swizzle K-major
canonical layout (core matrices of 8 rows x 16 bytes, each stored contiguously: the next
core matrix along K 128 bytes on, the next along M/N 256 bytes on), makes them visible
to the async proxy (``fence.proxy.async``), loads C into the accumulator registers, and
runs ``wgmma.fence`` / ``wgmma.mma_async`` (both operands through matrix descriptors) /
``commit_group`` / ``wait_group 0``. ``scale-d`` is a predicate taken per block.

Accumulator registers of thread ``t`` (warp ``w = t // 32``, lane ``l``, ``g = l // 4``,
``q = l % 4``): element ``i`` (``i < N/2``) is ``D[16w + g + 8 * (i // 2 % 2), 8 * (i // 4)
+ 2q + i % 2]``; f16 accumulators pack elements ``2j`` (low half) and ``2j + 1`` of that
order into register ``j``.

The descriptors put the K step (128 bytes) in the leading-dimension byte offset and the
M/N step (256 bytes) in the stride byte offset (no swizzle). A first launch with small
integer inputs (exact in every model) checks that the layout gives ``A @ B + C``; on an
H100 it does (the opposite convention reads outside shared memory).

Golden file ``wgmma-sm_90a.npz``: for each form ``j``, ``{j}.text`` (the instruction and
its immediates as JSON), ``{j}.a``/``{j}.b``/``{j}.c`` raw bits ``[blocks, rows, cols]``,
``{j}.scale_d`` ``[blocks]`` and ``{j}.d`` the hardware's D ``[blocks, 64, N]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

#: (instruction text, immediates after scale-d, blocks)
FORMS = (
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", (1, 1, 0, 0), 24),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16", (1, 1, 0, 0), 24),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", (1, 1, 0, 0), 24),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", (-1, 1, 0, 0), 8),
    ("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", (1, 1), 24),
    *(
        (f"wgmma.mma_async.sync.aligned.m64n8k32.{d}.{a}.{b}", (1, 1), 24)
        for d in ("f32", "f16")
        for a in ("e4m3", "e5m2")
        for b in ("e4m3", "e5m2")
    ),
    ("wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e5m2", (1, -1), 8),
    ("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8", (), 16),
    ("wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8.satfinite", (), 16),
    ("wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc", (), 8),
    ("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2", (1, 1), 4),
    ("wgmma.mma_async.sync.aligned.m64n32k16.f16.f16.f16", (1, 1, 0, 0), 4),
)
#: (exponent bits, mantissa bits) of the floating formats; bits per element of all
FLOAT = {"f16": (5, 10), "bf16": (8, 7), "tf32": (8, 10), "f32": (8, 23), "e4m3": (4, 3),
         "e5m2": (5, 2)}  # fmt: skip
BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8,
        "b1": 1, "s32": 32}  # fmt: skip


def parse(text: str):
    """(n, k, dtype, atype, btype) of a wgmma text."""
    parts = text.split(".")
    shape = parts[4]
    n, k = int(shape.split("n")[1].split("k")[0]), int(shape.split("k")[1])
    return n, k, parts[5], parts[6], parts[7]


# ------------------------------------------------------------------------------- inputs
def random_bits(fmt: str, shape, rng, tiny=False):
    """Raw bits: mostly moderate exponents, with signed zeros, subnormals, any finite
    exponent and arbitrary patterns (NaN, Inf); ``tiny``: exponents near the smallest."""
    n = int(np.prod(shape))
    if fmt not in FLOAT:
        return rng.integers(0, 1 << BITS[fmt], n).reshape(shape).astype(np.uint32)
    eb, mb = FLOAT[fmt]
    bias = (1 << (eb - 1)) - 1
    sign = rng.integers(0, 2, n)
    man = rng.integers(0, 1 << mb, n)
    ex = np.clip((1 if tiny else bias) + rng.integers(-4, 5, n), 1, (1 << eb) - 2)
    bits = (sign << (eb + mb)) | (ex << mb) | man
    kind = rng.random(n)
    bits = np.where(kind < 0.08, sign << (eb + mb), bits)
    bits = np.where((kind >= 0.08) & (kind < 0.16), (sign << (eb + mb)) | man, bits)
    if not tiny:
        wide = (sign << (eb + mb)) | (rng.integers(1, (1 << eb) - 1, n) << mb) | man
        bits = np.where((kind >= 0.16) & (kind < 0.24), wide, bits)
        bits = np.where(kind >= 0.97, rng.integers(0, 1 << (1 + eb + mb), n), bits)
    if fmt == "tf32":
        bits = (bits << 13) | rng.integers(0, 1 << 13, n)  # ignored by the hardware
    return bits.reshape(shape).astype(np.uint32)


def inputs(text: str, blocks: int, seed: int):
    """A [blocks, 64, K], B [blocks, K, N], C [blocks, 64, N] raw bits and scale_d."""
    n, k, d, a, b = parse(text)
    rng = np.random.default_rng(seed)
    A = random_bits(a, (blocks, 64, k), rng)
    B = random_bits(b, (blocks, k, n), rng)
    C = random_bits(d, (blocks, 64, n), rng)
    if a in FLOAT:
        # rows 48-63 and the last two columns tiny (subnormal results, zero terms that
        # set e_max), rows 56-63 with C = 0
        A[:, 48:] = random_bits(a, (blocks, 16, k), rng, tiny=True)
        B[:, :, -2:] = random_bits(b, (blocks, k, 2), rng, tiny=True)
        C[:, 48:] = random_bits(d, (blocks, 16, n), rng, tiny=True)
        C[:, 56:] = 0
        # rows 40-47: A[:, 1] = -A[:, 0]; in odd blocks B[1] = B[0]: exact cancellation,
        # so that the accumulator's truncation shows
        sbit = np.uint32(1 << (BITS[a] - 1))
        A[:, 40:48, 1] = A[:, 40:48, 0] ^ sbit
        B[1::2, 1] = B[1::2, 0]
    scale_d = (np.arange(blocks) % 4 != 3).astype(np.int32)  # every 4th block: D = A * B
    return A, B, C, scale_d


# ------------------------------------------------------------------------------- layouts
def row_bytes(x, fmt: str):
    """[..., rows, cols] raw bits -> [..., rows, 32] bytes (element 0 first, little end)."""
    if fmt == "b1":
        return np.packbits(x.astype(np.uint8) & 1, axis=-1, bitorder="little")
    width = BITS[fmt] // 8
    dt = {1: "<u1", 2: "<u2", 4: "<u4"}[width]
    y = np.ascontiguousarray(x.astype(dt))
    return y.view(np.uint8).reshape(x.shape[:-1] + (x.shape[-1] * width,))


def smem_image(rows_by_bytes):
    """[blocks, R, 32] -> [blocks, R * 32]: core matrices (8 rows x 16 bytes), (g, c) at
    byte (2g + c) * 128."""
    blocks, R, _ = rows_by_bytes.shape
    x = rows_by_bytes.reshape(blocks, R // 8, 8, 2, 16).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(x).reshape(blocks, R * 32)


def acc_index(n: int, dtype: str):
    """(row, col) of every accumulator element held by the 128 threads: [128, N/2]."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col


def to_regs(C, dtype: str):
    """[blocks, 64, N] -> [blocks, 128, nregs] uint32."""
    n = C.shape[-1]
    row, col = acc_index(n, dtype)
    e = C[:, row, col].astype(np.uint32)  # [blocks, 128, N/2]
    if dtype == "f16":
        return (e[..., 0::2] & 0xFFFF) | (e[..., 1::2] << 16)
    return e


def from_regs(regs, n: int, dtype: str):
    row, col = acc_index(n, dtype)
    if dtype == "f16":
        e = np.empty(regs.shape[:-1] + (n // 2,), np.uint32)
        e[..., 0::2], e[..., 1::2] = regs & 0xFFFF, regs >> 16
    else:
        e = regs
    D = np.zeros((regs.shape[0], 64, n), np.uint32)
    D[:, row, col] = e
    return D


# ------------------------------------------------------------------------------- kernels
def kernel_name(j: int) -> str:
    return f"wgmma_{j}"


def kernel_source(j: int, text: str, imm) -> str:
    n, k, d, a, b = parse(text)
    nregs = n // 2 if d != "f16" else n // 4
    a_bytes, b_bytes = 64 * 32, n * 32
    regs = ", ".join(f"%{i}" for i in range(nregs))
    cons = ", ".join(f'"+r"(r[{i}])' for i in range(nregs))
    tail = "".join(f", {v}" for v in imm)
    return f"""
extern "C" __global__ void {kernel_name(j)}(const unsigned char* a_img,
    const unsigned char* b_img, const unsigned* c, unsigned* d, const int* scale_d) {{
  __shared__ __align__(128) unsigned char sm[{a_bytes + b_bytes}];
  const int t = threadIdx.x;
  const unsigned char* ga = a_img + (size_t)blockIdx.x * {a_bytes};
  const unsigned char* gb = b_img + (size_t)blockIdx.x * {b_bytes};
  for (int i = t; i < {a_bytes}; i += 128) sm[i] = ga[i];
  for (int i = t; i < {b_bytes}; i += 128) sm[{a_bytes} + i] = gb[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  unsigned r[{nregs}];
  for (int i = 0; i < {nregs}; ++i) r[i] = c[((size_t)blockIdx.x * 128 + t) * {nregs} + i];
  unsigned long long base = (unsigned long long)__cvta_generic_to_shared(sm);
  // leading-dimension byte offset: the K step (128); stride byte offset: the M/N step (256)
  unsigned long long fields = ((128ull >> 4) << 16) | ((256ull >> 4) << 32);
  unsigned long long da = ((base & 0x3FFFF) >> 4) | fields;
  unsigned long long db = (((base + {a_bytes}) & 0x3FFFF) >> 4) | fields;
  int sd = scale_d[blockIdx.x];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nregs + 2}, 0;\\n"
               "{text} {{{regs}}}, %{nregs}, %{nregs + 1}, p{tail};\\n}}\\n"
               : {cons} : "l"(da), "l"(db), "r"(sd) : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < {nregs}; ++i) d[((size_t)blockIdx.x * 128 + t) * {nregs} + i] = r[i];
}}
"""


def build(build_dir: str) -> str:
    src = "".join(kernel_source(j, t, imm) for j, (t, imm, _) in enumerate(FORMS))
    cu = os.path.join(build_dir, "wgmma_capture.cu")
    with open(cu, "w") as f:
        f.write(src)
    cubin = os.path.join(build_dir, "wgmma_capture.cubin")
    cmd = ["nvcc", "-cubin", "-arch=sm_90a", "-O2", "-o", cubin, cu]
    subprocess.run(cmd, check=True)
    return cubin


def launch(fn, A, B, C, scale_d, text):
    import cupy as cp

    n, k, d, a, b = parse(text)
    a_img = smem_image(row_bytes(A, a))
    b_img = smem_image(row_bytes(np.swapaxes(B, -1, -2), b))  # B is K-major: rows are n
    regs = to_regs(C, d)
    out = cp.zeros(regs.shape, cp.uint32)
    args = (cp.asarray(a_img), cp.asarray(b_img), cp.asarray(regs), out,
            cp.asarray(scale_d.astype(np.int32)))  # fmt: skip
    fn((A.shape[0],), (128,), args)
    cp.cuda.runtime.deviceSynchronize()
    return from_regs(cp.asnumpy(out), n, d)


def layout_probe(fn, text) -> bool:
    """Whether the layouts give A @ B + C on small integers (an f16 form)."""
    rng = np.random.default_rng(1)
    Av = rng.integers(-3, 4, (2, 64, 16)).astype(np.float16)
    Bv = rng.integers(-3, 4, (2, 16, 8)).astype(np.float16)
    Cv = rng.integers(-3, 4, (2, 64, 8)).astype(np.float32)
    want = (Av.astype(np.float32) @ Bv.astype(np.float32) + Cv).view(np.uint32)
    A, B, C = Av.view(np.uint16).astype(np.uint32), Bv.view(np.uint16).astype(np.uint32), Cv
    got = launch(fn, A, B, C.view(np.uint32), np.ones(2, np.int32), text)
    ok = bool((got == want).all())
    print(f"layout probe: {'A @ B + C' if ok else 'differs'}", flush=True)
    return ok


def main(out_dir: str) -> None:
    import cupy as cp

    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mod = cp.RawModule(path=build(tmp))
        fns = [mod.get_function(kernel_name(j)) for j in range(len(FORMS))]
        if not layout_probe(fns[0], FORMS[0][0]):
            sys.exit("the layouts do not reproduce A @ B + C")
        record = {}
        path = os.path.join(out_dir, "wgmma-sm_90a.npz")
        for j, (text, imm, blocks) in enumerate(FORMS):
            A, B, C, sd = inputs(text, blocks, seed=1000 + j)
            D = launch(fns[j], A, B, C, sd, text)
            _, _, d, a, b = parse(text)
            record[f"{j}.text"] = np.array(json.dumps({"text": text, "imm": list(imm)}))
            small = lambda x, f: x.astype(np.uint8 if BITS[f] <= 8 else  # noqa: E731
                                          np.uint16 if BITS[f] == 16 else np.uint32)  # fmt: skip
            record[f"{j}.a"], record[f"{j}.b"] = small(A, a), small(B, b)
            record[f"{j}.c"], record[f"{j}.d"] = small(C, d), small(D, d)
            record[f"{j}.scale_d"] = sd.astype(np.uint8)
            np.savez_compressed(path, **record)  # after every form: a crash keeps the rest
            print(f"{text} {imm}: {blocks} warpgroups", flush=True)
        print(f"saved {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
