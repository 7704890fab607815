"""Where an instruction of a compiled module came from, and which equation of a jaxpr it
may compute.

jax writes each equation's Python call stack (its user frames, innermost first) into the
metadata of the HLO it lowers it to: ``stack_frame_id=N`` names a frame of the module's
``StackFrames`` table, whose ``FileLocations``, ``FileNames`` and ``FunctionNames`` give
the file, the function, the line and the column; XLA copies the metadata to every clone
of an instruction when it fuses. So two equations that compute the same shapes in the
same way (the two layer norms of a block, the q / k / v projections and the output
projection) can be told apart by the source lines that made them, and a fusion's dots,
reduces and adds can be paired with their equations one by one rather than by shape.

A frame here is ``(file basename, function, line, column)``; a chain is a tuple of frames,
innermost first. :func:`nearest` keeps, of the module's candidates for an equation, those
whose chain agrees with the equation's for the most frames from the innermost out, and
keeps all of them where no chain agrees even on the innermost frame (the text has no
frames, or the function was not written where the module was compiled): the frames only
ever narrow a choice that the shapes leave open, and where several candidates remain the
callers' own rules (one plan for all of them, or a refusal) apply as before.
"""

from __future__ import annotations

import dataclasses
import os
import re

from jax._src import source_info_util  # the user frames jax writes into a module

from .. import util

_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(-?\d+)")


def _sections(text: str) -> dict:
    """The module's frame tables, by name: ``{id: row text}`` each."""
    out: dict = {}
    cur = None
    for line in text.splitlines():
        s = line.strip()
        if s in _SECTIONS:
            cur = out.setdefault(s, {})
            continue
        if not s or s.startswith(("%", "ENTRY", "HloModule")):
            cur = None
            continue
        m = _ROW.match(s)
        if cur is not None and m:
            cur[int(m.group(1))] = m.group(2)
    return out


def _parents(frames: dict) -> dict | None:
    """``{frame: parent frame or 0}``. The text prints each frame's parent either as its
    number (0: none) or, in the XLA versions captured, as that number plus one (the
    outermost frame shows itself); the reading under which every parent comes before its
    child is taken, and None is returned where neither is."""
    raw = {i: dict((k, int(v)) for k, v in _FIELD.findall(row)).get("parent_frame_id", 0)
           for i, row in frames.items()}  # fmt: skip
    for shift in (0, 1):
        par = {i: max(p - shift, 0) for i, p in raw.items()}
        if all(p < i and (p == 0 or p in frames) for i, p in par.items()):
            return par
    return None


_COMPS = (".<locals>.<listcomp>", ".<locals>.<dictcomp>", ".<locals>.<setcomp>")


def _inline(chain: tuple) -> tuple:
    """``chain`` as Python 3.12 and later see it: a list, dict or set comprehension runs
    in its function's own frame (PEP 709), where Python 3.11 gives it a frame of its own,
    called from the function at the same line. The two read alike this way."""
    out: list = []
    skip = None
    for f in chain:
        if skip is not None and (f[1], f[2]) == skip:
            skip = None
            continue
        skip = None
        for suffix in _COMPS:
            if f[1].endswith(suffix):
                f = (f[0], f[1][: -len(suffix)], f[2], f[3])
                skip = (f[1], f[2])
                break
        out.append(f)
    return tuple(out)


def table(text: str) -> dict:
    """``{stack_frame_id: chain}`` of the module ``text`` (empty where it shows no frame
    tables or they do not read as a tree)."""
    sec = _sections(text)
    if not all(k in sec for k in _SECTIONS):
        return {}

    def name(row: str) -> str:
        return row.strip().strip('"')

    files = {i: os.path.basename(name(r)) for i, r in sec["FileNames"].items()}
    funcs = {i: name(r) for i, r in sec["FunctionNames"].items()}
    locs = {}
    for i, row in sec["FileLocations"].items():
        f = {k: int(v) for k, v in _FIELD.findall(row)}
        locs[i] = (
            files.get(f.get("file_name_id", 0), ""),
            funcs.get(f.get("function_name_id", 0), ""),
            f.get("line", -1),
            f.get("column", -1),
        )
    parents = _parents(sec["StackFrames"])
    if parents is None:
        return {}
    own = {}
    for i, row in sec["StackFrames"].items():
        f = {k: int(v) for k, v in _FIELD.findall(row)}
        own[i] = locs.get(f.get("file_location_id", 0))
    chains: dict = {}
    for i in sorted(own):  # parents first
        if own[i] is None:
            return {}
        p = parents[i]
        chains[i] = (own[i],) + (chains[p] if p else ())
    return {i: _inline(c) for i, c in chains.items()}


def of(ins, chains: dict) -> tuple:
    """The chain of an instruction (its metadata's ``stack_frame_id``), or ``()``."""
    m = re.search(r"stack_frame_id=(\d+)", ins.attrs)
    return chains.get(int(m.group(1)), ()) if m else ()


def primitive(ins) -> str:
    """The jax primitive its metadata names (the last part of ``op_name``), or ``""``."""
    return ins.op_name().rsplit("/", 1)[-1]


def of_eqn(eqn) -> tuple:
    """The chain of a jaxpr equation: its user frames, innermost first, as jax writes
    them into the module it lowers (jax's own files and the standard library left out)."""
    tb = getattr(getattr(eqn, "source_info", None), "traceback", None)
    if tb is None:
        return ()
    return _inline(
        tuple(
            (os.path.basename(f.file_name), f.function_name, f.start_line, f.start_column)
            for f in source_info_util.user_frames(tb)
        )
    )


def common(a: tuple, b: tuple) -> int:
    """How many frames two chains share from the innermost out."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def score(eqn_chain: tuple, prim: str, chain: tuple, ins_prim: str) -> int:
    """How well an instruction (``chain``, its metadata's primitive ``ins_prim``) fits an
    equation: the frames they share, 0 where the primitives differ."""
    if ins_prim and prim and ins_prim != prim:
        return 0
    return common(eqn_chain, chain)


def fitting(eqn, items: list, chain_of, prim_of=None) -> list:
    """Those of ``items`` that fit ``eqn`` best, where the best shares at least the
    innermost frame; else ``[]`` (the frames say nothing of ``eqn``)."""
    items = list(items)
    mine = of_eqn(eqn)
    if not mine or not items:
        return []
    prim = eqn.primitive.name
    s = [score(mine, prim, chain_of(x), prim_of(x) if prim_of else "") for x in items]
    best = max(s)
    return [x for x, k in zip(items, s, strict=True) if k == best] if best else []


def nearest(eqn, items: list, chain_of, prim_of=None) -> list:
    """Those of ``items`` that fit ``eqn`` best (:func:`score`, ``chain_of(item)`` and
    ``prim_of(item)`` giving an item's chain and primitive), or all of them where none
    shares even the innermost frame."""
    items = list(items)
    return (fitting(eqn, items, chain_of, prim_of) or items) if len(items) > 1 else items


def strip(x):
    """``x`` (a dot plan or refusal, a :class:`._hlo.Sum` or ``Site``, an ``Emitters``,
    or a list of them) without its frames: for a module whose frames do not
    :func:`agree` with the function."""
    if isinstance(x, list):
        return [strip(y) for y in x]
    if not dataclasses.is_dataclass(x):
        return x
    names = {f.name for f in dataclasses.fields(x)}
    kw: dict = {}
    if "frames" in names:
        kw["frames"] = ()
    for k in ("sums", "sites"):
        if k in names:
            kw[k] = tuple(strip(y) for y in getattr(x, k))
    return dataclasses.replace(x, **kw)


def innermost(text: str) -> frozenset:
    """The innermost frame of every instruction of the module that shows one."""
    chains = table(text)
    ids = {int(m) for m in re.findall(r"stack_frame_id=(\d+)", text)}
    return frozenset(chains[i][0] for i in ids if chains.get(i))


def _eqn_frames(jaxpr, out: set) -> set:
    for e in jaxpr.eqns:
        c = of_eqn(e)
        if c:
            out.add(c[0])
        for j in util.sub_jaxprs(e):
            _eqn_frames(j, out)
    return out


def agree(jaxpr, text: str) -> bool:
    """Whether the module's frames can be read as ``jaxpr``'s: it shows frames, and every
    instruction's innermost frame is one of the equations' (the function was not edited
    since the module was compiled: a line that moved would pair an instruction with
    another equation)."""
    shown = innermost(text)
    return bool(shown) and shown <= _eqn_frames(jaxpr, set())


def primitive_of(op_name: str) -> str:
    """The jax primitive an ``op_name`` names (its last part)."""
    return op_name.rsplit("/", 1)[-1]
