"""Build the test kernels with ``nvcc`` and run them on the GPU through CuPy.

Compilation needs only ``nvcc`` (no GPU): :func:`compile_kernels` writes the kernels into
a handful of ``.cu`` files, compiles them in parallel (one ``nvcc -cubin`` process per
file) and caches each cubin under the hash of its source and flags. When a file fails,
its kernels are compiled one by one so that one bad form never hides the others.
Running needs CuPy, imported lazily here and nowhere else.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np

from . import _kernels


def default_build_dir(arch: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"jaxmma-conformance-{arch}")


def jobs() -> int:
    return max(1, os.cpu_count() or 1)


@dataclasses.dataclass
class Build:
    """Result of :func:`compile_kernels`: cubin path per kernel name, errors per name."""

    cubins: dict
    errors: dict
    seconds: float
    files: int


def _run(cmd) -> tuple[bool, str]:
    p = subprocess.run(cmd, capture_output=True, text=True)
    msg = "\n".join(
        ln for ln in (p.stdout + p.stderr).splitlines() if "Advisory" not in ln and ln.strip()
    )
    return p.returncode == 0, msg


def _entries_at(ptx: str, lines) -> set:
    """Names of the ``.entry`` functions holding the given 1-based PTX line numbers."""
    starts = [
        (i + 1, m.group(1))
        for i, ln in enumerate(ptx.splitlines())
        if (m := re.search(r"\.entry\s+(\w+)", ln))
    ]
    names = set()
    for n in lines:
        owner = [name for start, name in starts if start <= n]
        if owner:
            names.add(owner[-1])
    return names


def _compile_chunk(chunk, arch: str, build_dir: str):
    """Compile one ``.cu`` of kernels with ``nvcc -cubin --keep``. Returns (cubin or None,
    {kernel name: error}); ptxas errors are mapped to kernels through the kept PTX."""
    src = _kernels.source(chunk)
    flags = _kernels.nvcc_target(arch)
    h = hashlib.sha1((flags + "\n" + src).encode()).hexdigest()[:20]
    base = os.path.join(build_dir, f"k_{h}")
    if os.path.exists(base + ".cubin"):
        return base + ".cubin", {}
    with open(base + ".cu", "w") as fh:
        fh.write(src)
    keep = base + ".keep"
    os.makedirs(keep, exist_ok=True)
    cmd = [
        "nvcc",
        "-cubin",
        flags,
        "--keep",
        "--keep-dir",
        keep,
        "-o",
        base + ".cubin.tmp",
        base + ".cu",
    ]
    ok, msg = _run(cmd)
    ptx_path = os.path.join(keep, f"k_{h}.ptx")
    ptx = ""
    if not ok and os.path.exists(ptx_path):
        with open(ptx_path) as fh:
            ptx = fh.read()
    shutil.rmtree(keep, ignore_errors=True)
    if ok:
        os.replace(base + ".cubin.tmp", base + ".cubin")
        return base + ".cubin", {}
    errors = {}
    for ln in msg.splitlines():
        m = re.search(r"line (\d+); error", ln)
        if m and ptx:
            for name in _entries_at(ptx, [int(m.group(1))]):
                errors.setdefault(name, []).append(re.sub(r"^ptxas \S+, ", "", ln))
    if not errors:
        return None, {k.name: "nvcc: " + _first_errors(msg) for k in chunk}
    return None, {n: "ptxas: " + "; ".join(e[:3]) for n, e in errors.items()}


def compile_kernels(
    kernels,
    arch: str,
    build_dir: str | None = None,
    files: int | None = None,
    workers: int | None = None,
    log=print,
) -> Build:
    """Compile ``kernels`` (:class:`~jaxmma.conformance._kernels.Kernel`) for ``arch``.

    Kernels ``ptxas`` refuses are named from its error lines and the rest of their file is
    compiled again without them (a file that still fails is compiled kernel by kernel).
    """
    if shutil.which("nvcc") is None:
        raise RuntimeError("nvcc is not on PATH")
    t0 = time.perf_counter()
    build_dir = build_dir or default_build_dir(arch)
    os.makedirs(build_dir, exist_ok=True)
    workers = workers or jobs()
    files = files or max(1, min(len(kernels), 2 * workers))
    chunks = [[] for _ in range(files)]
    sizes = [0] * files
    for k in sorted(kernels, key=lambda k: (-len(k.source), k.name)):  # balance by size
        i = sizes.index(min(sizes))
        chunks[i].append(k)
        sizes[i] += len(k.source)
    chunks = [sorted(c, key=lambda k: k.name) for c in chunks if c]
    cubins, errors, nfiles = {}, {}, 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for attempt in range(3):
            todo = []
            nfiles += len(chunks)
            jobs_ = [pool.submit(_compile_chunk, c, arch, build_dir) for c in chunks]
            for chunk, fut in zip(chunks, jobs_, strict=True):
                cubin, errs = fut.result()
                if cubin:
                    cubins.update((k.name, cubin) for k in chunk)
                    continue
                rest = [k for k in chunk if k.name not in errs]
                if attempt == 2 or len(errs) == len(chunk) and len(chunk) == 1:
                    errors.update(errs)
                elif len(errs) == len(chunk):  # not attributable: one by one
                    todo += [[k] for k in chunk]
                else:
                    errors.update(errs)
                    todo.append(rest)
            if not todo:
                break
            n = sum(len(c) for c in todo)
            log(f"  ptxas refused {len(errors)} kernels; compiling the other {n} again")
            chunks = todo
    return Build(cubins, errors, time.perf_counter() - t0, nfiles)


def _first_errors(msg: str, n: int = 3) -> str:
    lines = [re.sub(r"^ptxas \S+, ", "", ln) for ln in msg.splitlines() if "error" in ln]
    return "; ".join(lines[:n]) or msg[:300]


# ----------------------------------------------------------------------------- running
def device_info() -> dict:
    """Name, compute capability and versions of GPU 0 (needs CuPy)."""
    import cupy

    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(0)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    nvcc = ""
    if shutil.which("nvcc"):
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
        nvcc = out.strip().splitlines()[-1] if out.strip() else ""
    return {
        "device": name,
        "arch": f"sm_{props['major']}{props['minor']}",
        "driver": rt.driverGetVersion(),
        "cuda_runtime": rt.runtimeGetVersion(),
        "nvcc": nvcc,
        "cupy": cupy.__version__,
    }


class Runner:
    """Loads cubins once and runs kernels on the warps of a :class:`Vectors`."""

    def __init__(self, build: Build):
        import cupy

        self.cp = cupy
        self.build = build
        self.modules = {}

    def function(self, name: str):
        path = self.build.cubins[name]
        if path not in self.modules:
            self.modules[path] = self.cp.RawModule(path=path)
        return self.modules[path].get_function(name)

    def healthy(self) -> bool:
        """Whether the CUDA context still works (a kernel fault makes it unusable)."""
        try:
            self.cp.cuda.runtime.deviceSynchronize()
            return int(self.cp.arange(4).sum().get()) == 6
        except Exception:  # noqa: BLE001
            return False

    def run(self, kernels, vectors) -> dict:
        """Run each kernel on the warps whose immediates it was built for; NumPy outputs."""
        cp = self.cp
        W = vectors.warps
        results = {}
        for k in kernels:
            rows = (
                np.all(vectors.imms == np.asarray(k.imm, np.int64), axis=1)
                if k.imm
                else np.ones(W, bool)
            )
            idx = np.nonzero(rows)[0]
            if idx.size == 0:
                continue
            fn = self.function(k.name)
            args = [cp.asarray(np.ascontiguousarray(vectors.arrays[n][idx])) for n in k.inputs]
            io = [cp.asarray(np.ascontiguousarray(vectors.arrays[n][idx])) for n in k.inout]
            outs = []
            for _name, nregs, dt in k.outputs:
                shape = (idx.size, 32, nregs) if nregs else (idx.size, 32)
                outs.append(cp.zeros(shape, dtype=dt))
            fn((idx.size,), (32,), (*args, *io, *outs, np.int32(idx.size)))
            cp.cuda.runtime.deviceSynchronize()
            named = [
                *zip(k.inout, io, strict=True),
                *((o[0], a) for o, a in zip(k.outputs, outs, strict=True)),
            ]
            for n, arr in named:
                host = cp.asnumpy(arr)
                if n not in results:
                    results[n] = np.zeros((W, *host.shape[1:]), host.dtype)
                results[n][idx] = host
        return results


# ----------------------------------------------------------------------------- SASS
def sass(cubins, names=None) -> dict:
    """``cuobjdump -sass`` text per kernel name (all kernels of the given cubin files)."""
    if shutil.which("cuobjdump") is None:
        raise RuntimeError("cuobjdump is not on PATH")

    def dump(path):
        cmd = ["cuobjdump", "-sass", path]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    out = {}
    with concurrent.futures.ThreadPoolExecutor(jobs()) as pool:
        for text in pool.map(dump, sorted(set(cubins))):
            parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
            for name, body in zip(parts[1::2], parts[2::2], strict=True):
                if names is None or name in names:
                    out[name] = f"Function : {name}\n{body.rstrip()}\n"
    return out
