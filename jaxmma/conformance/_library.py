"""Library GEMM captures: what ``torch.mm``, ``torch.addmm`` and ``torch._scaled_mm`` give
on a GPU, stored as golden files and reproduced on any backend by ``jaxmma.matmul``.

A :class:`Case` names one library call: the operation (``mm``, ``addmm``, ``scaled_mm``),
the input and output types, M, N, K, the fp8 scaling (``tensor``: scalar scales; ``row``:
one scale per row of A and per column of B; ``block``: 1x128 scales of A and 128x128
scales of B, as DeepSeek-V3 quantizes) and ``use_fast_accum``. Its inputs are rebuilt
from the case and a seed with the integer SplitMix64 streams of :mod:`._gemm` (exact
float64 steps only, so any NumPy rebuilds the same bits); a record keeps the output bits,
the kernel names the profiler saw, the versions, and the CRC32 of the rebuilt inputs.

Run on a GPU with PyTorch (``python -m jaxmma.conformance._library --save DIR``); it
writes ``library-<op>.npz`` files in the format of :mod:`._golden`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import zlib

import numpy as np

from . import _gemm, _golden

GENERATOR = "jaxmma-library/1"
FORMAT = 1
TYPES = ("bf16", "f16", "tf32", "e4m3")
OUTS = ("bf16", "f16", "f32")
OPS = ("mm", "addmm", "scaled_mm", "linear")
SCALINGS = (None, "tensor", "row", "block")


@dataclasses.dataclass(frozen=True)
class Case:
    """One library GEMM ``D = op(A [M, K], B [K, N])``; ``out`` is D's type (and C's for
    ``addmm``); ``tf32`` inputs are f32 arrays run with ``allow_tf32``."""

    op: str
    dtype: str
    out: str
    M: int
    N: int
    K: int
    scaling: str | None = None
    fast_accum: bool = False
    seed: int = 0
    alpha: float | None = None  # addmm's alpha and beta (None: the default 1)
    beta: float | None = None

    def check(self) -> None:
        if self.op not in OPS or self.dtype not in TYPES or self.out not in OUTS:
            raise ValueError(f"unknown case {self}")
        if (self.op == "scaled_mm") != (self.dtype == "e4m3") or (self.op == "scaled_mm") != (
            self.scaling is not None
        ):
            raise ValueError(f"scaled_mm takes e4m3 inputs and a scaling: {self}")
        if self.scaling == "block" and (self.K % 128 or self.N % 128):
            raise ValueError(f"block scales need K and N multiples of 128: {self}")

    @property
    def key(self) -> str:
        s = f"|{self.scaling}|fast={int(self.fast_accum)}" if self.op == "scaled_mm" else ""
        if self.alpha is not None or self.beta is not None:
            s += f"|alpha={self.alpha}|beta={self.beta}"
        return f"{self.op}|{self.dtype}->{self.out}|{self.M}x{self.N}x{self.K}{s}|seed={self.seed}"

    # the streams of _gemm._Streams are keyed by these two
    @property
    def data_key(self) -> str:
        return self.key

    def group(self) -> str:
        return f"library-{self.op}"


def default_cases() -> list[Case]:
    """The captured calls: long K with small M x N (cuBLAS splits K), a short K, both
    output types; tf32; fp8 with every scaling, fast accumulation on and off."""
    out = []
    for t in ("bf16", "f16"):
        for o in (t, "f32"):
            out += [Case("mm", t, o, 64, 64, 1024), Case("mm", t, o, 64, 64, 4096)]
            out += [Case("addmm", t, o, 128, 128, 1024), Case("addmm", t, o, 64, 64, 4096)]
    out += [Case("mm", t, "f32", 128, 64, 8192) for t in ("bf16", "f16")]
    out += [Case("mm", "bf16", "bf16", 128, 64, 8192)]
    out += [Case("mm", "tf32", "f32", M, N, K) for M, N, K in ((128, 128, 1024), (64, 64, 4096))]
    out += [Case("mm", "tf32", "f32", 128, 64, 8192)]
    for fast in (False, True):
        for o in ("f32", "bf16"):
            out += [Case("scaled_mm", "e4m3", o, 64, 64, 1024, "tensor", fast)]
            out += [Case("scaled_mm", "e4m3", o, 64, 64, 4096, "tensor", fast)]
            out += [Case("scaled_mm", "e4m3", o, 128, 128, 1024, "row", fast)]
    out += [Case("scaled_mm", "e4m3", o, 128, 256, 1024, "block") for o in ("f32", "bf16")]
    return out + second_cases()


def second_cases() -> list[Case]:
    """The second capture: addmm's alpha and beta; a linear layer's bias."""
    ab = dict(alpha=0.7, beta=-1.3)
    out = [Case("addmm", "bf16", o, 128, 128, 1024, **ab) for o in ("f32", "bf16")]
    out += [Case("addmm", "bf16", "f32", 64, 64, 4096, **ab)]
    out += [Case("linear", t, t, 128, 128, 1024) for t in ("bf16", "f16")]
    out += [Case("linear", "bf16", "bf16", 64, 64, 4096)]
    return out


# ----------------------------------------------------------------------------- inputs
def _codes(fmt: str, x: np.ndarray) -> np.ndarray:
    return _gemm.encode_floats("f32" if fmt == "tf32" else fmt, x)


_WIDTH = {"bf16": np.uint16, "f16": np.uint16, "f32": np.uint32, "tf32": np.uint32}


def inputs(case: Case) -> dict:
    """Raw element bits of the case's operands: ``A [M, K]``, ``B [K, N]``, ``C [M, N]``
    (``addmm``; in ``out``), ``SA``/``SB`` (``float32`` scales: ``[]``, ``[M, 1]`` /
    ``[1, N]``, ``[M, K/128]`` / ``[K/128, N/128]``)."""
    case.check()
    st = _gemm._Streams(case)
    M, N, K = case.M, case.N, case.K
    out = {}
    amp = 2.0 if case.dtype == "e4m3" else 1.0  # fp8: use more of its range
    for name, shape in (("A", (M, K)), ("B", (K, N))):
        codes = _codes(case.dtype, st.normal(f"{name}/z", shape) * amp)
        out[name] = codes.astype(np.uint8 if case.dtype == "e4m3" else _WIDTH[case.dtype])
    if case.op in ("addmm", "linear"):
        shape = (M, N) if case.op == "addmm" else (N,)
        z = st.normal("C/z", shape) * 2.0 ** (_gemm._log2(K) // 2)
        out["C"] = _codes(case.out, z).astype(_WIDTH[case.out])
    if case.scaling is not None:
        shapes = {
            "tensor": ((), ()),
            "row": ((M, 1), (1, N)),
            "block": ((M, K // 128), (K // 128, N // 128)),
        }[case.scaling]
        for name, shape in zip(("SA", "SB"), shapes, strict=True):
            # positive f32 scales 2^e * (1 + f), e in [-4, 3], 23 random fraction bits
            e = st.below(f"{name}/e", shape, 8) - 4
            f = st.bits(f"{name}/f", shape, 23)
            bits = ((e + 127).astype(np.uint64) << np.uint64(23)) | f
            out[name] = np.asarray(bits, np.uint32).view(np.float32)
    return out


def inputs_crc32(case: Case, arrays: dict) -> int:
    crc = zlib.crc32(case.key.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        crc = zlib.crc32(f"{name}:{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(a.tobytes(), crc)
    return crc


def case_of(record: _golden.Record) -> Case:
    m = record.meta
    return Case(
        m["op"], m["dtype"], m["out"], m["M"], m["N"], m["K"], m["scaling"],
        bool(m["fast_accum"]), m["seed"], m.get("alpha"), m.get("beta"),
    )  # fmt: skip


def regenerate(record: _golden.Record) -> dict:
    """The inputs of ``record``, rebuilt and CRC32-checked."""
    case = case_of(record)
    if record.meta.get("generator") != GENERATOR:
        raise ValueError(f"{case.key}: captured with {record.meta.get('generator')!r}")
    arrays = inputs(case)
    if inputs_crc32(case, arrays) != record.meta["inputs_crc32"]:
        raise ValueError(f"{case.key}: the rebuilt inputs differ from the captured ones")
    return arrays


def load(directory: str) -> list:
    """Every library record under ``directory`` (``library-*.npz``)."""
    files = sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.startswith("library-") and n.endswith(".npz")
    )
    return [r for p in files for r in _golden.load_golden(p)]


# ----------------------------------------------------------------------------- emulation
#: the instruction each library kernel runs on sm_90 (docs/gemm.md): cuBLAS ``nvjet``
#: kernels run ``wgmma``, for bf16/f16 the ``mma.sync`` k16 chain gives the same bits;
#: cuBLAS tf32 runs CUTLASS ``s1688gemm`` (``mma.sync`` m16n8k8); fp8 runs ``wgmma`` k32
INSTRUCTIONS = {
    "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "sm_90"),
    "f16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "sm_90"),
    "tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "sm_90"),
    "e4m3": ("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "sm_90a"),
}
#: split counts cuBLAS chose for the captured shapes (not in the kernel names: found by
#: trying counts against the capture; every other count tried misses elements)
SPLITS = {
    **{
        (op, t, o, 64, 64, 4096): 3
        for op in ("mm", "addmm")
        for t in ("bf16", "f16")
        for o in (t, "f32")
    },
    **{
        ("mm", t, o, 128, 64, 8192): 6
        for t, o in (("bf16", "f32"), ("f16", "f32"), ("bf16", "bf16"))
    },
    ("linear", "bf16", "bf16", 64, 64, 4096): 3,
    ("mm", "tf32", "f32", 128, 128, 1024): 16,
    ("mm", "tf32", "f32", 64, 64, 4096): 32,
    ("mm", "tf32", "f32", 128, 64, 8192): 33,
}


def kernel_options(case: Case, kernels) -> dict:
    """``matmul`` keywords that model the library call ``case`` run by ``kernels`` (the
    kernel names the profiler saw)."""
    text, arch = INSTRUCTIONS[case.dtype]
    out = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[case.out]
    kw = {"instruction": text, "arch": arch, "out_dtype": out}
    names = " ".join(kernels)
    split = "splitK" in names
    if split:
        S = SPLITS[(case.op, case.dtype, case.out, case.M, case.N, case.K)]
        if case.dtype == "tf32":  # CUTLASS: the K tile is in the kernel name (64x64_32x6)
            tile = int(names.split("s1688gemm_")[1].split("_")[1].split("x")[0])
            kw.update(split_k=S, k_tile=tile, split_rule="cutlass")
        else:
            kw.update(split_k=S, k_tile=64, split_rule="cublas")
    if case.dtype == "tf32":
        kw["input_rounding"] = "rn"
    if case.op == "addmm":
        # nvjet's "badd" epilogue rounds a 16-bit result twice; "bx" (alpha/beta) and
        # the split-K reduce round once
        kw["epilogue"] = "rounded" if case.out != "f32" and "_badd_" in names else "f32"
        if case.alpha is not None:
            kw.update(alpha=case.alpha, beta=case.beta)
    if case.op == "linear":  # the bias: one f32 add in the epilogue, one rounding
        kw["epilogue"] = "f32"
    if case.op == "scaled_mm" and case.scaling != "block" and not case.fast_accum:
        kw["promote_every"] = 4
    return kw


# ----------------------------------------------------------------------------- capture
def _run(torch, case: Case, arrays: dict):
    """The library call on the GPU; D's raw bits and the kernels the profiler saw."""
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    dev = "cuda"

    def tensor(bits, fmt):
        if fmt == "e4m3":
            return torch.from_numpy(bits.copy()).view(torch.float8_e4m3fn).to(dev)
        if fmt in ("tf32", "f32"):
            return torch.from_numpy(bits.view(np.int32).copy()).view(torch.float32).to(dev)
        return torch.from_numpy(bits.view(np.int16).copy()).view(tdt[fmt]).to(dev)

    A = tensor(arrays["A"], case.dtype)
    B = tensor(arrays["B"], case.dtype)
    torch.backends.cuda.matmul.allow_tf32 = case.dtype == "tf32"
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    out = tdt[case.out]
    if case.op == "scaled_mm":
        Bc = B.t().contiguous().t()  # column-major, as cuBLASLt wants it
        sa = torch.from_numpy(arrays["SA"].copy()).to(dev)
        sb = torch.from_numpy(arrays["SB"].copy()).to(dev)
        if case.scaling == "block":
            sa = sa.t().contiguous().t()  # [M, K/128] with stride (1, M)
            sb = sb.t().contiguous().t()  # [K/128, N/128] with stride (1, K/128)

        def call():
            return torch._scaled_mm(
                A, Bc, scale_a=sa, scale_b=sb, out_dtype=out, use_fast_accum=case.fast_accum
            )
    elif case.op == "mm":

        def call():
            return torch.mm(A, B) if out == A.dtype else torch.mm(A, B, out_dtype=out)
    elif case.op == "linear":
        bias = tensor(arrays["C"], case.out)
        W = B.t().contiguous()  # [N, K], as a layer stores its weight

        def call():
            return torch.nn.functional.linear(A, W, bias)
    else:
        C = tensor(arrays["C"], case.out)
        ab = {}
        if case.alpha is not None:
            ab = {"alpha": case.alpha, "beta": case.beta}

        def call():
            if out == A.dtype:
                return torch.addmm(C, A, B, **ab)
            return torch.addmm(C, A, B, out_dtype=out, **ab)

    call()  # warm-up: handles and heuristics outside the profile
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        D = call()
        torch.cuda.synchronize()
    kernels = sorted(
        {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    )
    if D.dtype == torch.float32:
        bits = D.contiguous().view(torch.int32).cpu().numpy().view(np.uint32)
    else:
        bits = D.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
    return bits, kernels


def capture(cases, date: str, log=print) -> list:
    """Records of ``cases`` (a GPU with PyTorch); a case the library refuses is logged
    and skipped."""
    import torch

    info = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "cublas": str(torch.backends.cuda.preferred_blas_library()),
    }
    records = []
    for case in cases:
        arrays = inputs(case)
        try:
            bits, kernels = _run(torch, case, arrays)
        except Exception as e:  # noqa: BLE001  (a refused call is a finding, logged)
            log(f"REFUSED {case.key}: {type(e).__name__}: {str(e)[:300]}")
            continue
        outputs = {"d": bits}
        meta = {
            "format": FORMAT,
            "kind": "library",
            "text": case.key,
            "key": case.key,
            **dataclasses.asdict(case),
            **info,
            "date": date,
            "generator": GENERATOR,
            "kernels": kernels,
            "inputs_crc32": inputs_crc32(case, arrays),
            "outputs_crc32": _golden.outputs_crc32(outputs),
            "outputs": {n: [a.dtype.str, list(a.shape)] for n, a in outputs.items()},
        }
        log(f"{case.key}: {' + '.join(kernels)}")
        records.append(_golden.Record(meta, outputs))
    return records


def save(directory: str, records) -> dict:
    return _golden.write_groups(
        directory, records, lambda r: case_of(r).group(), lambda r: r.meta["key"]
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save", metavar="DIR", required=True)
    p.add_argument("--second", action="store_true", help="only the second capture's cases")
    args = p.parse_args(argv)
    records = capture(second_cases() if args.second else default_cases(), _gemm.now())
    sizes = save(args.save, records)
    print(json.dumps(sizes, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
