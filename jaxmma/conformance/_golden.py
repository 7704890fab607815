"""Golden files: hardware outputs captured on a GPU, checked later without one.

Layout: ``tests/golden/<arch>/<group>.npz``, one compressed NumPy archive per group of
forms (:func:`group_name`: opcode family and type family, ``wmma.mma`` also by shape).
Record ``i`` of a file is stored as

* ``"{i:04d}.meta"``: a 0-d unicode array holding JSON: ``text``, ``arch``, ``device``,
  ``driver``, ``cuda_runtime``, ``nvcc``, ``date`` (UTC), ``seed``, ``warps``,
  ``generator`` (the :mod:`._vectors` version string), ``dists`` (distribution name per
  warp), ``imm_names`` and ``imms`` (immediates per warp: sparsity selector, block-scale
  ids), ``inputs_crc32`` (of the regenerated inputs, :meth:`Vectors.crc32`),
  ``outputs_crc32`` and ``outputs`` (name -> dtype and shape);
* ``"{i:04d}.<name>"``: each hardware output: destination registers ``d``
  (``[warps, 32, nregs]``; movmatrix ``[warps, 32]``), ``ldmatrix`` registers ``r``, and
  for ``stmatrix``/``wmma.store`` the whole image after the store (``smem``/``mem``,
  ``uint8 [warps, nbytes]``; it started as ``FILL`` bytes, which compress to nothing).

Inputs are never stored: :func:`regenerate_inputs` rebuilds them from (text, seed, warps)
and refuses when their CRC32 differs (the generator drifted). :func:`load_golden` refuses a
record whose outputs do not match their CRC32 (the file was edited).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import zlib

import numpy as np

import jaxmma

from . import _vectors

FORMAT = 1


@dataclasses.dataclass(frozen=True, eq=False)
class Record:
    """One captured form: ``meta`` (see the module docstring) and ``outputs`` by name."""

    meta: dict
    outputs: dict

    @property
    def text(self) -> str:
        return self.meta["text"]

    @property
    def arch(self) -> str:
        return self.meta["arch"]

    def instruction(self):
        return jaxmma.instruction(self.text, arch=self.arch)


def outputs_crc32(outputs: dict) -> int:
    crc = 0
    for name in sorted(outputs):
        a = np.ascontiguousarray(outputs[name])
        crc = zlib.crc32(f"{name}:{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(a.tobytes(), crc)
    return crc


def make_record(
    vectors: _vectors.Vectors, arch: str, outputs: dict, info: dict, date: str
) -> Record:
    """A record of hardware ``outputs`` for ``vectors`` (``info``: device and versions)."""
    meta = {
        "format": FORMAT,
        "text": vectors.text,
        "arch": arch,
        "device": info.get("device", ""),
        "driver": info.get("driver", ""),
        "cuda_runtime": info.get("cuda_runtime", ""),
        "nvcc": info.get("nvcc", ""),
        "date": date,
        "seed": vectors.seed,
        "warps": vectors.warps,
        "generator": _vectors.GENERATOR,
        "dists": list(vectors.dists),
        "imm_names": list(vectors.imm_names),
        "imms": vectors.imms.tolist(),
        "inputs_crc32": vectors.crc32(),
        "outputs_crc32": outputs_crc32(outputs),
        "outputs": {n: [a.dtype.str, list(a.shape)] for n, a in sorted(outputs.items())},
    }
    return Record(meta, dict(outputs))


def group_name(ins) -> str:
    """The golden file (without ``.npz``) that holds the records of ``ins``."""
    op = ins.opcode
    if op in ("ldmatrix", "stmatrix", "movmatrix"):
        return "movement"
    typ = ins.atype or ins.btype or ins.ctype or ins.dtype
    fam = ins.kind or {
        "e4m3": "fp8",
        "e5m2": "fp8",
        "s8": "i8",
        "u8": "i8",
        "s4": "i4",
        "u4": "i4",
    }.get(typ, typ)
    head = op.replace(".", "_")
    if ins.sparse:
        head += "_sp" if ins.sparse == "sp" else "_sp_ordered"
    name = f"{head}-{fam}"
    if op == "wmma.mma":
        name += f"-{ins.shape}"
    return name


def load_golden(path: str):
    """Yield the :class:`Record` objects of one ``.npz`` golden file (outputs verified)."""
    with np.load(path, allow_pickle=False) as z:
        keys = sorted(z.files)
        for mk in (k for k in keys if k.endswith(".meta")):
            prefix = mk[: -len(".meta")]
            meta = json.loads(str(z[mk][()]))
            outputs = {n: z[f"{prefix}.{n}"] for n in meta["outputs"]}
            if outputs_crc32(outputs) != meta["outputs_crc32"]:
                raise ValueError(
                    f"{path}: the outputs of {meta['text']!r} do not match their "
                    "CRC32: the file was modified"
                )
            yield Record(meta, outputs)


def golden_files(directory: str) -> list:
    """The single-instruction golden files (not the chained GEMM ``gemm-*.npz``)."""
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n.endswith(".npz") and not n.startswith("gemm-")
    )


def regenerate_inputs(record: Record) -> _vectors.Vectors:
    """The inputs of ``record``, rebuilt from its text, seed and warps; CRC32-checked."""
    m = record.meta
    if m.get("generator") != _vectors.GENERATOR:
        raise ValueError(
            f"{m['text']!r} was captured with generator {m.get('generator')!r}; "
            f"this is {_vectors.GENERATOR!r}"
        )
    vec = _vectors.inputs(record.instruction(), m["seed"], m["warps"])
    if vec.crc32() != m["inputs_crc32"]:
        raise ValueError(
            f"{m['text']!r}: regenerated inputs have CRC32 {vec.crc32():#010x}, "
            f"the golden record {m['inputs_crc32']:#010x}: the generator drifted "
            "or the record was modified"
        )
    return vec


def save(directory: str, records) -> dict:
    """Write ``records`` into their group files under ``directory``; records already there
    with another text are kept, those with the same text replaced. Returns path -> bytes."""
    return write_groups(directory, records, lambda r: group_name(r.instruction()), lambda r: r.text)


def write_groups(directory: str, records, group_of, key_of) -> dict:
    """Write ``records`` into ``<group_of(r)>.npz`` files under ``directory``, one entry per
    ``key_of(r)``, sorted by key: records already in a file with another key are kept,
    those with the same key replaced. Each file is written whole and then moved into place.
    Returns path -> bytes."""
    os.makedirs(directory, exist_ok=True)
    groups = {}
    for rec in records:
        groups.setdefault(group_of(rec), []).append(rec)
    sizes = {}
    for group, recs in sorted(groups.items()):
        path = os.path.join(directory, f"{group}.npz")
        by_key = {}
        if os.path.exists(path):
            by_key = {key_of(r): r for r in load_golden(path)}
        by_key.update((key_of(r), r) for r in recs)
        entries = {}
        for i, key in enumerate(sorted(by_key)):
            r = by_key[key]
            entries[f"{i:04d}.meta"] = np.array(json.dumps(r.meta, sort_keys=True))
            for n, arr in r.outputs.items():
                entries[f"{i:04d}.{n}"] = np.ascontiguousarray(arr)
        fd, tmp = tempfile.mkstemp(suffix=".npz", dir=directory)
        os.close(fd)
        np.savez_compressed(tmp, **entries)
        os.replace(tmp, path)
        sizes[path] = os.path.getsize(path)
    return sizes
