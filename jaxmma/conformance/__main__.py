"""``python -m jaxmma.conformance``: run the instructions on a GPU, or check golden files.

Commands
  run      on a GPU: generate inputs, compile one kernel per form (and per immediate),
           run them, optionally save golden files, dump SASS and compare with the emulator.
  check    no GPU: regenerate the inputs of every golden record, run the emulator and
           compare with the stored hardware outputs, with a progress bar and a summary
           line (``--sample N``: N forms spanning the families; ``--quiet``: only rows
           that are not ok). Exit status 1 when an implemented form differs (or a record
           fails its CRC).
  list     the forms a run would take, their warps, kernels and golden group.
  compile  compile every kernel with the local nvcc (no GPU needed) and report.
  gemm     on a GPU: chained GEMMs (``mma`` over many k-steps, optional f32 promotion) of
           a few forms (``_gemm.FORMS``), saved as ``gemm-*.npz`` golden files; checked
           by tests/test_gemm_golden.py.

Warps per form (``--warps N``, default 128): ``mma``/``wmma.mma`` get N warps for the
primary variant of a form (first layout pair, no ``.satfinite``, ``.rn``) and N // 4 for
pure qualifier variants (other layouts, ``.satfinite``, rounding modes); a sparse form
shares them over its selectors. ``ldmatrix``/``stmatrix``/``movmatrix``/``wmma.load``/
``wmma.store`` get min(N, 32).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import os
import re
import sys
import time

# JAX (the emulator) and CuPy share the GPU: JAX must not take most of its memory.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jaxmma  # noqa: E402

from . import _compare, _gemm, _golden, _gpu, _kernels, _vectors  # noqa: E402

ORDER = ("mma", "movmatrix", "wmma.mma", "ldmatrix", "stmatrix", "wmma.load", "wmma.store")


def _default_golden() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "tests", "golden", "sm_90")


def is_primary(ins) -> bool:
    """The first variant of its form (others differ only in qualifiers)."""
    f = ins.form
    if ins.satfinite or (f.rounding and ins.rounding != f.rounding[0]):
        return False
    if ins.opcode in ("mma", "wmma.mma"):
        return (ins.alayout, ins.blayout) == f.layouts[0]
    return True


def plan_warps(ins, warps: int) -> int:
    if ins.opcode in ("mma", "wmma.mma"):
        return warps if is_primary(ins) else max(4, warps // 4)
    return min(warps, 32)


def select(pattern: str | None, arch: str, texts=(), log=print) -> list:
    """Instructions whose text matches ``pattern`` (``re.search``) that ``arch`` runs,
    plus the explicit ``texts``; the others are named as skipped."""
    rx = re.compile(pattern) if pattern else None
    chosen, skipped = [], 0
    for ins in jaxmma.all_instructions():
        if ins.opcode not in ORDER:  # warpgroup forms: see _wgmma_capture.py
            continue
        if rx and not rx.search(ins.text):
            continue
        if not ins.runs_on(arch):
            skipped += 1
            if rx:
                log(f"  skipped (needs {ins.targets}): {ins.text}")
            continue
        chosen.append(jaxmma.instruction(ins.text, arch=arch))
    for t in texts:
        chosen.append(jaxmma.instruction(t, arch=arch))
    if skipped and not rx:
        log(f"  skipped {skipped} forms that {arch} cannot run (sm_100a/sm_120a forms)")
    seen, out = set(), []
    for ins in sorted(chosen, key=lambda i: (ORDER.index(i.opcode), i.text)):
        if ins.text not in seen:
            seen.add(ins.text)
            out.append(ins)
    return out


# ----------------------------------------------------------------------------- output
def _row(i: int, r: _compare.Result) -> str:
    pct = f"{100.0 * r.equal / r.total:8.3f}%" if r.total else " " * 9
    el = f"{r.equal}/{r.total}" if r.total else "-"
    wp = f"{r.warps_equal}/{r.warps}" if r.total else f"-/{r.warps}"
    return f"{i:4d}  {r.status:15s} {wp:>9s} {el:>15s} {pct} {r.seconds:6.1f}s  {r.text}"


HEAD = f"{'#':>4s}  {'status':15s} {'warps':>9s} {'elements':>15s} {'':9s} {'time':>7s}  form"


def _print_result(i, r, verbose=True):
    print(_row(i, r), flush=True)
    if r.message and verbose:
        print(f"{'':6s}{r.message[:400]}", flush=True)


def _summary(results) -> int:
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    eq = sum(r.equal for r in results)
    tot = sum(r.total for r in results)
    print(
        "summary: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + (f"; {eq}/{tot} compared elements bit-exact" if tot else "")
    )
    return 1 if any(r.failed for r in results) else 0


# ----------------------------------------------------------------------------- commands
def cmd_list(args) -> int:
    forms = select(args.forms, args.arch, args.text)
    total_k = total_b = 0
    for ins in forms:
        w = plan_warps(ins, args.warps)
        ks = _kernels.kernels(ins, w)
        nbytes = _output_bytes(ins, w)
        total_k += len(ks)
        total_b += nbytes
        print(
            f"{w:4d} warps {len(ks):2d} kernels {nbytes / 1024:8.1f} KiB  "
            f"{_golden.group_name(ins):28s} {ins.text}"
        )
    print(
        f"{len(forms)} forms, {total_k} kernels, {total_b / 2**20:.1f} MiB of outputs "
        "(uncompressed)"
    )
    return 0


def _output_bytes(ins, warps: int) -> int:
    if ins.opcode in ("stmatrix", "wmma.store"):
        n = _vectors.SMEM_BYTES if ins.opcode == "stmatrix" else _vectors.wmma_geometry(ins).nbytes
        return warps * n
    op = next(o for o in ins.operands if o.output)
    return warps * 32 * op.nregs * op.reg_bits // 8


def _all_kernels(forms, warps):
    return {ins.text: _kernels.kernels(ins, plan_warps(ins, warps)) for ins in forms}


def cmd_compile(args) -> int:

    forms = select(args.forms, args.arch, args.text)
    kmap = _all_kernels(forms, args.warps)
    ks = [k for v in kmap.values() for k in v]
    print(
        f"compiling {len(ks)} kernels of {len(forms)} forms for {args.arch} "
        f"({_kernels.nvcc_target(args.arch)}, {_gpu.jobs()} jobs)",
        flush=True,
    )
    b = _gpu.compile_kernels(ks, args.arch, args.build)
    print(
        f"compiled {len(b.cubins)} kernels ({b.files} nvcc runs) in {b.seconds:.1f} s; "
        f"{len(b.errors)} refused"
    )
    texts = {k.name: k.text for k in ks}
    for n, e in sorted(b.errors.items(), key=lambda x: texts[x[0]]):
        print(f"  {texts[n]}: {e[:300]}")
    return 1 if b.errors else 0


def cmd_run(args) -> int:

    t_all = time.perf_counter()
    info = _gpu.device_info()
    arch = args.arch or info["arch"]
    print(
        f"device: {info['device']} ({info['arch']}), driver {info['driver']}, "
        f"CUDA runtime {info['cuda_runtime']}, {info['nvcc']}; emulating {arch}",
        flush=True,
    )
    forms = select(args.forms, arch, args.text)
    if not forms:
        print("no forms selected")
        return 1
    kmap = _all_kernels(forms, args.warps)
    ks = [k for v in kmap.values() for k in v]
    print(
        f"{len(forms)} forms, {len(ks)} kernels; compiling with {_gpu.jobs()} jobs "
        "while generating inputs",
        flush=True,
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(
            _gpu.compile_kernels, ks, arch, args.build, None, None, lambda m: print(m, flush=True)
        )
        t0 = time.perf_counter()
        vecs = {
            ins.text: _vectors.inputs(ins, args.seed, plan_warps(ins, args.warps)) for ins in forms
        }
        t_vec = time.perf_counter() - t0
        build = fut.result()
    print(
        f"inputs: {t_vec:.1f} s; compile: {len(build.cubins)} kernels ({build.files} nvcc runs) in"
        f" {build.seconds:.1f} s, {len(build.errors)} refused by ptxas",
        flush=True,
    )

    results = {}
    outputs = {}
    runner = _gpu.Runner(build)
    t0 = time.perf_counter()
    broken = None
    for i, ins in enumerate(forms):
        kl = kmap[ins.text]
        bad = [build.errors[k.name] for k in kl if k.name not in build.cubins]
        if bad:
            results[ins.text] = _compare.Result(
                ins.text, "compile error", warps=vecs[ins.text].warps, message=bad[0]
            )
            continue
        if broken:
            results[ins.text] = _compare.Result(ins.text, "gpu error", message=broken)
            continue
        try:
            outputs[ins.text] = runner.run(kl, vecs[ins.text])
        except Exception as e:  # noqa: BLE001 - report and carry on while the GPU works
            msg = f"{type(e).__name__}: {e}"[:300]
            results[ins.text] = _compare.Result(ins.text, "gpu error", message=msg)
            if not runner.healthy():
                broken = f"not run: the CUDA context failed earlier ({msg})"
        if (i + 1) % 50 == 0 or i + 1 == len(forms):
            print(
                f"  gpu: {i + 1}/{len(forms)} forms, {time.perf_counter() - t0:.1f} s", flush=True
            )
    t_gpu = time.perf_counter() - t0
    print(f"gpu: {len(outputs)} forms ran in {t_gpu:.1f} s", flush=True)

    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records = [_golden.make_record(vecs[t], arch, o, info, date) for t, o in outputs.items()]
    if args.save:
        t0 = time.perf_counter()
        sizes = _golden.save(args.save, records) or {"(nothing)": 0}
        print(
            f"saved {len(records)} records in {len(sizes)} files under {args.save}: "
            f"{sum(sizes.values()) / 2**20:.1f} MiB (largest "
            f"{max(sizes.values()) / 2**20:.2f} MiB), {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    if args.sass:
        _write_sass(args.sass, forms, kmap, build)

    if args.no_emulator:
        for ins in forms:
            if ins.text in outputs:
                results[ins.text] = _compare.Result(
                    ins.text, "hardware only", warps=vecs[ins.text].warps
                )
    print(HEAD)
    deadline = time.perf_counter() + args.time_limit if args.time_limit else None
    for i, ins in enumerate(forms):
        if ins.text not in results:
            if deadline and time.perf_counter() > deadline:
                results[ins.text] = _compare.Result(
                    ins.text,
                    "not compared",
                    warps=vecs[ins.text].warps,
                    message="--time-limit reached",
                )
            else:
                results[ins.text] = _compare.compare(ins, vecs[ins.text], outputs[ins.text])
        _print_result(i, results[ins.text])
    status = _summary(results.values())
    print(f"total {time.perf_counter() - t_all:.1f} s")
    return status


def _write_sass(directory, forms, kmap, build):

    t0 = time.perf_counter()
    os.makedirs(directory, exist_ok=True)
    names = {k.name for v in kmap.values() for k in v if k.name in build.cubins}
    text = _gpu.sass([build.cubins[n] for n in names], names)
    n = 0
    for ins in forms:
        parts = [f"// {ins.text} {k.imm}\n{text[k.name]}" for k in kmap[ins.text] if k.name in text]
        if parts:
            fname = re.sub(r"[^A-Za-z0-9._-]", "_", ins.text) + ".sass"
            with open(os.path.join(directory, fname), "w") as fh:
                fh.write("\n".join(parts))
            n += 1
    print(f"sass: {n} files under {directory}, {time.perf_counter() - t0:.1f} s", flush=True)


def golden_records(golden: str, forms: str | None = None, sample: int | None = None):
    """``(records, broken)``: the golden records under ``golden`` whose text matches
    ``forms`` (``re.search``), and a ``Result`` per file that fails its CRC. With
    ``sample=n``, one record (the one with the fewest warps) from each of ``n`` files,
    taken in turn from each opcode family (``mma``, ``mma_sp``, ``movement``,
    ``wmma_mma``, ...) and spread over the files of a family, so a small sample spans them."""
    rx = re.compile(forms) if forms else None
    files = _golden.golden_files(golden)
    if sample is not None:
        if sample < 1:
            raise ValueError(f"sample: expected a positive count, got {sample}")
        heads = {}
        for path in files:
            heads.setdefault(os.path.basename(path).split("-")[0], []).append(path)
        spread = {h: [fs[i] for i in _spread(len(fs))] for h, fs in heads.items()}
        order = [fs[j] for j in range(len(files)) for fs in spread.values() if j < len(fs)]
        files = order[:sample]
    records, broken = [], []
    for path in files:
        try:
            recs = [r for r in _golden.load_golden(path) if not rx or rx.search(r.text)]
        except Exception as e:  # noqa: BLE001
            broken.append(_compare.Result(os.path.basename(path), "crc mismatch", message=str(e)))
            continue
        if sample is not None and recs:
            recs = [min(recs, key=lambda r: (r.meta["warps"], r.text))]
        records.extend(recs)
    return records, broken


def _spread(n: int) -> list:
    """0..n-1 in an order that spreads over the range: 0, n/2, n/4, 3n/4, ..."""
    out, denom = [0], 2
    while len(out) < n:
        for num in range(1, denom, 2):
            i = num * n // denom
            if i not in out:
                out.append(i)
        denom *= 2
    return out[:n] if n else []


def check_records(records, *, quiet: bool = False, desc: str = "conformance") -> list:
    """Compare every record with the emulator, with a progress bar; print a row per form
    (``quiet``: only the forms that are not ``ok``). Returns the :class:`Result` list."""
    from tqdm import tqdm

    results = []
    bar = tqdm(records, desc=desc, unit="form", file=sys.stderr, dynamic_ncols=True)
    for i, rec in enumerate(bar):
        bar.set_postfix_str(rec.text.replace("sync.aligned.", "")[:48], refresh=False)
        try:
            vec = _golden.regenerate_inputs(rec)
        except Exception as e:  # noqa: BLE001
            r = _compare.Result(rec.text, "crc mismatch", message=str(e))
        else:
            r = _compare.compare(rec.instruction(), vec, rec.outputs)
        results.append(r)
        if not quiet or r.status != "ok":
            bar.write(_row(i, r), file=sys.stdout)
            if r.message:
                bar.write(f"{'':6s}{r.message[:400]}", file=sys.stdout)
    bar.close()
    return results


def cmd_check(args) -> int:
    golden = args.golden or _default_golden()
    if not os.path.isdir(golden):
        print(f"no golden directory {golden}")
        return 1
    records, broken = golden_records(golden, args.forms, args.sample)
    print(f"golden: {golden}: {len(records)} records")
    print(HEAD)
    for i, r in enumerate(broken):
        _print_result(i, r)
    t0 = time.perf_counter()
    results = broken + check_records(records, quiet=args.quiet)
    if not results:
        print("no records")
        return 0
    status = _summary(results)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return status


def cmd_gemm(args) -> int:
    t_all = time.perf_counter()
    info = _gpu.device_info()
    arch = args.arch or info["arch"]
    print(
        f"device: {info['device']} ({info['arch']}), driver {info['driver']}, "
        f"CUDA runtime {info['cuda_runtime']}, {info['nvcc']}; emulating {arch}",
        flush=True,
    )
    rx = re.compile(args.forms) if args.forms else None
    cases = [c for c in _gemm.default_cases(args.seed, arch) if not rx or rx.search(c.text)]
    if not cases:
        print("no cases selected")
        return 1
    ks = list(_gemm.kernels(cases).values())
    print(f"{len(cases)} chained GEMM cases, {len(ks)} kernels", flush=True)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(_gpu.compile_kernels, ks, arch, args.build)
        t0 = time.perf_counter()
        problems = [_gemm.inputs(c) for c in cases]
        frags = [_gemm.fragments(p) for p in problems]
        t_in = time.perf_counter() - t0
        build = fut.result()
    print(
        f"inputs and fragments: {t_in:.1f} s; compile: {len(build.cubins)} kernels in "
        f"{build.seconds:.1f} s, {len(build.errors)} refused",
        flush=True,
    )
    for name, err in build.errors.items():
        print(f"  {name}: {err[:300]}")
    runner = _gpu.Runner(build)
    date = _gemm.now()
    records, failed = [], 0
    t0 = time.perf_counter()
    for case, prob, fr in zip(cases, problems, frags, strict=True):
        try:
            d = _gemm.run_case(runner, case, fr)
        except Exception as e:  # noqa: BLE001 - report, keep the others
            failed += 1
            print(f"  gpu error: {case.key}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            if not runner.healthy():
                print("  the CUDA context failed; stopping", flush=True)
                break
            continue
        records.append(_gemm.make_record(prob, d, info, date))
        print(f"  {case.key}: d {list(d.shape)} crc {records[-1].meta['outputs_crc32']:#010x}")
    print(f"gpu: {len(records)} cases in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.save and records:
        sizes = _gemm.save(args.save, records)
        print(
            f"saved {len(records)} records in {len(sizes)} files under {args.save}: "
            f"{sum(sizes.values()) / 2**20:.2f} MiB",
            flush=True,
        )
    print(f"total {time.perf_counter() - t_all:.1f} s")
    return 1 if failed or build.errors else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jaxmma.conformance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, arch_default):
        sp.add_argument("--forms", help="regular expression on the instruction text")
        sp.add_argument(
            "--text",
            action="append",
            default=[],
            help="an extra instruction text (e.g. with .shared); repeatable",
        )
        sp.add_argument(
            "--warps", type=int, default=128, help="warps of a primary variant (default 128)"
        )
        sp.add_argument(
            "--arch", default=arch_default, help="architecture (run: the GPU's, e.g. sm_90)"
        )
        sp.add_argument("--build", help="build directory (default: a temp dir per arch)")

    r = sub.add_parser("run", help="run on the GPU (needs CuPy and nvcc)")
    common(r, None)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--save", metavar="DIR", help="write golden files, e.g. tests/golden/sm_90")
    r.add_argument("--sass", metavar="DIR", help="write one .sass file per form")
    r.add_argument("--no-emulator", action="store_true", help="hardware only, no comparison")
    r.add_argument(
        "--time-limit",
        type=float,
        default=0,
        help="stop comparing with the emulator after this many seconds",
    )
    c = sub.add_parser("check", help="compare golden files with the emulator (no GPU)")
    c.add_argument("--golden", help="golden directory (default tests/golden/sm_90)")
    c.add_argument("--forms", help="regular expression on the instruction text")
    c.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="one form from each of N golden files spread over the families",
    )
    c.add_argument("--quiet", action="store_true", help="print only the forms that are not ok")
    sp = sub.add_parser("list", help="the forms a run would take")
    common(sp, "sm_90")
    sp = sub.add_parser("compile", help="compile every kernel with the local nvcc")
    common(sp, "sm_90")
    g = sub.add_parser("gemm", help="chained GEMMs on the GPU (needs CuPy and nvcc)")
    g.add_argument("--forms", help="regular expression on the instruction text")
    g.add_argument("--arch", default=None, help="architecture (default: the GPU's)")
    g.add_argument("--build", help="build directory (default: a temp dir per arch)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--save", metavar="DIR", help="write gemm-*.npz, e.g. tests/golden/sm_90")
    args = p.parse_args(argv)
    cmds = {
        "run": cmd_run,
        "check": cmd_check,
        "list": cmd_list,
        "compile": cmd_compile,
        "gemm": cmd_gemm,
    }
    return cmds[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
