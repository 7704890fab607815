"""The native executor: the GPU's own tensor cores, chained in the modelled order.

Where the GPU at hand executes the requested form with the numerics jaxmma models, the
emulation's bits come from the device itself at its own speed: a Pallas kernel holds one
``bm x bn`` tile of D (started from C, in float32) and adds ``jnp.dot`` of one K tile
after another, in increasing k; the compiler emits the device's matrix instructions
(``wgmma`` on sm_90), each one fused block of the model with the accumulator as C. With
``promote_every=P``, every group of P instruction steps is chained from +0 (a +0 read at
run time, so that no compiler folds the total into the group's first dot) and added into
the float32 total by one FADD. The kernel runs exactly the instruction steps the emulation
runs (K padded with +0 to a multiple of k, never more: an extra all-zero step is not a
no-op for every model), and every NaN result leaves as the canonical NaN, as the model's
do.

Covered (:func:`why_not`), on a GPU of compute capability 9.0 (H100, H200), f32
accumulators, with or without ``promote_every``:

- bf16 x bf16 and f16 x f16: ``wgmma`` sm_90a and ``mma.sync`` m16n8k16 on sm_90 (the
  same model): ``jnp.dot`` of the element dtypes;
- fp8 ``wgmma`` (e4m3/e5m2, all four mixes): the device's fp8 ``wgmma`` with the
  accumulator kept in the tensor core across instructions
  (:func:`jaxmma.gemm._triton_ops.chained_dot`; JAX's own ``jnp.dot`` lowering splits the
  chain after every instruction);
- fp8 ``mma.sync`` m16n8k32 on sm_90, which the compiler runs as two f16 MMAs over
  interleaved k from +0 and one FADD of C per step (:func:`jaxmma.models._models.sm90_fp8`):
  the same on the device's f16 ``wgmma`` (e4m3/e5m2 values are exact in f16), the columns
  of each MMA made contiguous;
- tf32 ``wgmma`` and ``mma.sync`` m16n8k8 on sm_90 (the same model, blocks of 8): the
  device's tf32 ``wgmma`` on the registers with their low 13 bits cleared (the model
  ignores them, as the hardware does).

The kernel options of :mod:`._pipeline` (split-K, epilogues, scales, input rounding) run
their chains here too. Evidence: docs/gemm.md ("The native executor").
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from ..bits import CANONICAL_NAN, ELEMENT_DTYPES, FP8
from . import _partition, _recipes, _tiling, _triton_ops
from ._executor import Executor

F32 = jnp.float32
EXECUTORS = ("auto", "native", "emulate")
#: element dtypes the kernel feeds to its dots
_DTYPES = {fmt: ELEMENT_DTYPES[fmt] for fmt in ("bf16", "f16", *FP8, "tf32")}
#: the bits of a tf32 register the model reads (the low 13 are ignored)
TF32_MASK = 0xFFFFE000


@dataclasses.dataclass(frozen=True)
class Tiles:
    """The kernel's tiling: a ``bm x bn`` tile of D per program, K tiles of at most
    ``max_kt`` elements, programs in groups of ``group_m`` tile rows (0: row-major order)
    so that neighbouring programs share tiles of A and B in the cache."""

    bm: int = 128
    bn: int = 128
    max_kt: int = 64
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8


#: tiling on the GPU without and with promotion, the fastest of those
#: ``benchmarks/native_gpu.py --tune`` tries on an H100 (figures in benchmarks/RESULTS.md;
#: with promotion the larger tiles hold two accumulators and ran slower)
TILES = Tiles(bm=128, bn=256, max_kt=64, num_warps=8, num_stages=4, group_m=8)
PROMOTED_TILES = Tiles(bm=64, bn=128, max_kt=64, num_warps=4, num_stages=4, group_m=8)
#: tiling of interpreted runs (small: a CPU runs every program of the grid in turn)
INTERPRET_TILES = Tiles(bm=32, bn=32, max_kt=64, group_m=0)
#: groups of promote_every steps whose dots are written out inline, not looped over
UNROLL = 4


def why_not(ins) -> str | None:
    """Why the form has no native path on any device (None: it has one on sm_90)."""
    if ins.sparse or ins.stype or ins.kind:
        return "sparse and block-scaled forms have no native path on sm_90"
    if ins.dtype != "f32" or ins.ctype != "f32":
        return f"accumulators .{ins.ctype}/.{ins.dtype}: only .f32 accumulators run natively"
    a, b = ins.atype, ins.btype
    if a not in _DTYPES or b not in _DTYPES or (a != b and not (a in FP8 and b in FP8)):
        return (
            f".{a}/.{b} elements: natively only bf16, f16 and tf32 pairs and fp8 "
            "(e4m3/e5m2, any mix)"
        )
    if ins.opcode == "wgmma.mma_async":
        if ins.arch_number != 90:
            return f"wgmma numerics of {ins.arch}: the native path runs sm_90a's"
        return None
    if ins.opcode == "mma" and ins.arch_number == 90:
        if a in ("bf16", "f16") and ins.shape == "m16n8k16":
            return None
        if a in FP8 and ins.shape == "m16n8k32":
            return None  # two f16 MMAs on exactly converted elements, then an FADD
        if a == "tf32" and ins.shape == "m16n8k8":
            return None  # the tf32 wgmma model (blocks of 8)
    return f"{ins.text} on {ins.arch}: no sm_90 tensor-core instruction with its numerics"


def _route(ins) -> str:
    """How the kernel computes a step: ``"dot"`` (``jnp.dot`` of bf16/f16 elements),
    ``"f16"`` (fp8 converted to f16, then ``jnp.dot``), ``"fp8"`` (the device's fp8
    ``wgmma``, chained) or ``"tf32"``."""
    if ins.atype in FP8:
        return "fp8" if ins.opcode == "wgmma.mma_async" else "f16"
    return "tf32" if ins.atype == "tf32" else "dot"


def device_reason(ins=None) -> str | None:
    """Why the default device cannot run the native path of ``ins`` (None: it can)."""
    if jax.default_backend() != "gpu":
        return f"the default backend is {jax.default_backend()!r}, not a GPU"
    dev = jax.devices()[0]
    cc = getattr(dev, "compute_capability", None)
    if cc is None or str(cc) not in ("9.0",):
        return f"{dev.device_kind} (compute capability {cc}) is not an sm_90 GPU"
    if ins is not None and _route(ins) in ("fp8", "tf32"):
        return _triton_ops.triton_reason()
    return None


def why_not_here(ins) -> str | None:
    """Why ``ins`` cannot run on the native executor on this machine (its form, else the
    device), or None where it can; :func:`jaxmma.gemm._config.config` decides with it
    (and refuses ``executor='native'`` with the reason)."""
    return why_not(ins) or device_reason(ins)


def pieces(steps: int, most: int) -> list[int]:
    """``steps`` instruction steps cut into consecutive dots of power-of-two step counts
    (a block shape must be a power of two), each at most ``most``, largest first."""
    out = [most] * (steps // most)
    rest = steps % most
    bit = most
    while rest:
        bit //= 2
        if rest & bit:
            out.append(bit)
            rest -= bit
    return out


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The static order of the kernel's dots over ``steps`` instruction steps.

    Without promotion: ``loop`` iterations of one dot of ``most`` steps, then the dots of
    ``tail``, all chained into the accumulator that started at C. With promotion:
    ``loop`` iterations of ``per_iter`` groups, then a last group of ``tail`` steps; each
    group is ``inner`` iterations of one dot of ``most`` steps, then the dots of ``group``
    (the last group: of ``tail``), chained from +0 and added into the float32 total.
    """

    most: int  # steps per full K tile
    loop: int
    tail: tuple[int, ...]
    group: tuple[int, ...] = ()
    inner: int = 0
    per_iter: int = 1


def schedule(steps: int, promote_every, k: int, max_kt: int) -> Schedule:
    """The :class:`Schedule` of a GEMM of ``steps`` k-steps of an instruction with ``k``
    columns: exactly the emulation's steps in increasing k (never an extra one: an
    all-zero step is not a no-op in the model, it turns a -0 accumulator into +0)."""
    most = max(1, max_kt // k)
    if promote_every is None:
        return Schedule(most, steps // most, tuple(pieces(steps % most, most)))
    P = min(promote_every, steps)  # P >= steps: one group of all steps (the same bits)
    G, rest = divmod(steps, P)
    group, inner = tuple(pieces(P, most)), 0
    if len(group) > UNROLL:  # long groups: an inner loop over their full K tiles
        inner, group = P // most, tuple(pieces(P % most, most))
        return Schedule(most, G, tuple(pieces(rest, most)), group, inner)
    per_iter = 1
    while per_iter * 2 * P <= most and G % (per_iter * 2) == 0:
        per_iter *= 2
    return Schedule(most, G // per_iter, tuple(pieces(rest, most)), group, 0, per_iter)


def _dots(a_ref, b_ref, acc, start, counts, k: int, route: str, zero=None):
    """``acc`` plus the dots of ``counts`` consecutive steps from step ``start``, each
    fused with the accumulator as its C. ``"dot"``: the compiler chains ``acc +
    jnp.dot``; ``"fp8"``/``"tf32"``: :func:`._triton_ops.chained_dot` (fp8: ``b_ref`` holds
    B transposed, K-major as the fp8 and tf32 ``wgmma`` read both operands); ``"f16"`` (sm_90
    ``mma.sync`` fp8): every step a chain from ``zero`` (a +0 the compiler cannot fold),
    added into ``acc`` by one FADD."""
    for n in counts:
        if route == "f16":
            for _ in range(n):
                at = start * k if isinstance(start, int) else pl.multiple_of(start * k, k)
                ks = pl.ds(at, k)
                part = zero + jnp.dot(a_ref[:, ks], b_ref[ks, :], preferred_element_type=F32)
                acc = acc + part
                start = start + 1
            continue
        at = start * k if isinstance(start, int) else pl.multiple_of(start * k, k)
        ks = pl.ds(at, n * k)
        if route in ("fp8", "tf32"):
            acc = _triton_ops.chained_dot(a_ref[:, ks], b_ref[:, ks].T, acc, tf32=route == "tf32")
        else:
            acc = acc + jnp.dot(a_ref[:, ks], b_ref[ks, :], preferred_element_type=F32)
        start = start + n
    return acc


def _kernel(
    *refs, sch: Schedule, k: int, route: str, has_c: bool, scaled: bool, factors: int, shape
):
    a_ref, b_ref, *rest = refs
    c_ref = rest.pop(0) if has_c else None
    sa_ref, sb_ref = (rest.pop(0), rest.pop(0)) if (scaled or factors) else (None, None)
    z_ref = rest.pop(0) if _needs_zero(sch, route) else None
    (d_ref,) = rest
    acc = c_ref[...] if has_c else jnp.zeros(shape, F32)
    m = sch.most
    # a +0 the compiler cannot see: a group that is one dot from a literal zero would be
    # folded into ``total + dot`` (the dot chained from the total, other bits)
    zero = None if z_ref is None else jnp.full(shape, z_ref[0], F32)
    dots = functools.partial(_dots, a_ref, b_ref, k=k, route=route, zero=zero)
    if not (sch.group or sch.inner):
        body = lambda t, acc: dots(acc, t * m, (m,))  # noqa: E731
        acc = _loop(sch.loop, body, acc)
        d = dots(acc, sch.loop * m, sch.tail)
    else:
        size = sch.inner * m + sum(sch.group)

        def group(first, inner, counts, total):
            part = zero
            if inner:
                body = lambda t, p: dots(p, first + t * m, (m,))  # noqa: E731
                part = lax.fori_loop(0, inner, body, part)
            part = dots(part, first + inner * m, counts)
            if not scaled:
                return total + part  # one FADD into the float32 total
            g = first // size  # the block recipe: FMUL of the group's scales, one FFMA
            s = sa_ref[:, pl.ds(g, 1)] * sb_ref[pl.ds(g, 1), :]
            return _triton_ops.ffma(part, s, total)

        def groups(i, total):
            for g in range(sch.per_iter):
                total = group((i * sch.per_iter + g) * size, sch.inner, sch.group, total)
            return total

        total = _loop(sch.loop, groups, acc)
        if sch.tail:
            total = group(sch.loop * sch.per_iter * size, 0, sch.tail, total)
        d = total
    if factors:  # the kernel options' scales: B's column factor, then A's row factor
        neg0 = jnp.full(shape, -0.0, F32)  # fma(d, f, -0) is d * f rounded once (FMUL)
        d = _triton_ops.ffma(d, jnp.broadcast_to(sb_ref[...], shape), neg0)
        if factors == 2:
            d = _triton_ops.ffma(d, jnp.broadcast_to(sa_ref[...], shape), neg0)
    bits = lax.bitcast_convert_type(d, jnp.int32)
    d_ref[...] = jnp.where(d != d, jnp.int32(CANONICAL_NAN["f32"]), bits)  # NaN: the model's NaN


def _loop(n: int, body, init):
    """``lax.fori_loop(0, n, body, init)``, not traced at all for ``n == 0`` (its body
    would slice K tiles beyond a K shorter than one tile)."""
    return lax.fori_loop(0, n, body, init) if n else init


def _needs_zero(sch: Schedule, route: str) -> bool:
    return bool(sch.group or sch.inner or route == "f16")


def _interleave(K: int, k: int) -> np.ndarray:
    """sm_90 ``mma.sync`` fp8: within each step of ``k`` columns, the columns of the first
    f16 MMA (k % 4 in {0, 1}) before those of the second (k % 4 in {2, 3})."""
    step = [j for j in range(k) if j % 4 < 2] + [j for j in range(k) if j % 4 >= 2]
    return (np.arange(0, K, k)[:, None] + np.array(step)[None, :]).reshape(-1)


#: bytes of an element in the kernel's dots, per route
_BYTES = {"dot": 2, "f16": 2, "fp8": 1, "tf32": 4}


#: tilings by route and promotion where they differ from :func:`_tiles`' rule: the
#: fastest of those ``benchmarks/native_gpu.py --tune-routes`` tries (H200, 4096^3)
ROUTE_TILES: dict[tuple[str, bool], Tiles] = {
    ("fp8", False): Tiles(bm=128, bn=256, max_kt=128, num_warps=8, num_stages=3, group_m=8),
    ("fp8", True): Tiles(bm=64, bn=128, max_kt=128, num_warps=4, num_stages=4, group_m=8),
    ("tf32", True): Tiles(bm=128, bn=128, max_kt=16, num_warps=8, num_stages=4, group_m=8),
}


def _tiles(route: str, promote_every) -> Tiles:
    """The tiling of a route: :data:`ROUTE_TILES`, else :data:`TILES` (with promotion and
    on the ``"f16"`` route, whose every step is promoted: :data:`PROMOTED_TILES`) with K
    tiles of the same bytes (twice as many fp8 columns, half as many tf32 ones)."""
    promoted = promote_every is not None or route == "f16"
    if (route, promoted) in ROUTE_TILES:
        return ROUTE_TILES[route, promoted]
    t = PROMOTED_TILES if promoted else TILES
    return dataclasses.replace(t, max_kt=t.max_kt * 2 // _BYTES[route])


def gemm_bits(cfg, A, B, C, *, interpret=None, tiles: Tiles | None = None, block_scales=None):
    """The bits of :func:`jaxmma.gemm._executors.gemm_bits` through the device's tensor cores.

    ``A [..., M, K]``, ``B [..., K, N]``, ``C [..., M, N]`` raw bits (uint32) of a form
    :func:`why_not` accepts; ``C`` None is +0 (nothing to read). ``interpret``: Pallas
    interpret mode (default: off a GPU), where ``jnp.dot`` is the host's and gives the
    model's bits only when every sum is exact. ``tiles``: the tiling (default
    :data:`TILES`, :data:`INTERPRET_TILES` interpreted). ``block_scales``: see
    :func:`block_bits` (which pads K and passes them).
    """
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    # split over devices as XLA splits a dot (batch, M, N; never K): jaxmma/gemm/_partition.py
    return _partition.sharded(
        _gemm_bits, cfg, A, B, C, scales=block_scales, interpret=interpret, tiles=tiles
    )


def _gemm_bits(
    cfg, A, B, C, *, interpret: bool, tiles: Tiles | None, block_scales=None, factors: int = 0
):
    """:func:`gemm_bits` on one device (``factors``: see :func:`scaled_bits`)."""
    ins = cfg.ins
    if not interpret and (reason := _triton_ops.triton_reason()) and block_scales is not None:
        raise ValueError(f"the native kernel cannot apply scales here: {reason}")
    P = cfg.promote_every if block_scales is None or factors else _recipes.GROUP // ins.k
    route = _route(ins)
    t = tiles or (INTERPRET_TILES if interpret else _tiles(route, P))
    shapes = [A.shape[:-2], B.shape[:-2]] + ([] if C is None else [C.shape[:-2]])
    shapes += [x.shape[:-2] for x in block_scales or ()]
    lead = jnp.broadcast_shapes(*shapes)
    M, K = A.shape[-2:]
    N = B.shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    S = max(1, -(-K // ins.k))
    sch = schedule(S, P, ins.k, t.max_kt)
    Kp, Mp, Np = S * ins.k, -(-M // t.bm) * t.bm, -(-N // t.bn) * t.bn

    def prep(x, shape, rows, cols, fmt):
        x = jnp.broadcast_to(x, lead + x.shape[-2:]).reshape((nb,) + shape)
        x = jnp.pad(x, ((0, 0), (0, rows - shape[0]), (0, cols - shape[1])))
        if fmt == "f32":
            return lax.bitcast_convert_type(x, F32)
        if fmt == "tf32":
            return lax.bitcast_convert_type(x & jnp.uint32(TF32_MASK), F32)
        if fmt in FP8:
            v = lax.bitcast_convert_type(x.astype(jnp.uint8), _DTYPES[fmt])
            return v.astype(jnp.float16) if route == "f16" else v  # exact in f16
        return lax.bitcast_convert_type(x.astype(jnp.uint16), _DTYPES[fmt])

    gi, gj = Mp // t.bm, Np // t.bn

    def at(kind):
        def index(z, p):
            i, j = _tiling.grouped(p, gi, gj, t.group_m)
            return {"a": (z, i, 0), "b": (z, 0, j), "bt": (z, j, 0), "d": (z, i, j)}[kind]

        return index

    ops = [prep(A, (M, K), Mp, Kp, ins.atype), prep(B, (K, N), Kp, Np, ins.btype)]
    specs = [pl.BlockSpec((None, t.bm, Kp), at("a")), pl.BlockSpec((None, Kp, t.bn), at("b"))]
    if route in ("fp8", "tf32"):  # B K-major, [N, K]: wgmma transposes only 16-bit types
        ops[1] = jnp.swapaxes(ops[1], -1, -2)
        specs[1] = pl.BlockSpec((None, t.bn, Kp), at("bt"))
    if route == "f16":  # the k of each f16 MMA contiguous
        perm = _interleave(Kp, ins.k)
        ops = [ops[0][..., perm], ops[1][:, perm, :]]
    d_spec = pl.BlockSpec((None, t.bm, t.bn), at("d"))
    if C is not None:
        ops.append(prep(C, (M, N), Mp, Np, "f32"))
        specs.append(d_spec)
    if factors:  # A's row factor [M, 1], B's column factor [1, N]
        sa, sb = block_scales
        ops += [prep(sa, (M, 1), Mp, 1, "f32"), prep(sb, (1, N), 1, Np, "f32")]
        specs += [pl.BlockSpec((None, t.bm, 1), at("a")), pl.BlockSpec((None, 1, t.bn), at("b"))]
    elif block_scales is not None:
        sa, sb = block_scales
        G = sa.shape[-1]
        ops += [prep(sa, (M, G), Mp, G, "f32"), prep(sb, (G, N), G, Np, "f32")]
        specs += [pl.BlockSpec((None, t.bm, G), at("a")), pl.BlockSpec((None, G, t.bn), at("b"))]
    if _needs_zero(sch, route):
        ops.append(jnp.zeros((1,), F32))
        specs.append(pl.BlockSpec((1,), lambda z, p: (0,)))
    kwargs = {}
    if not interpret:
        kwargs["compiler_params"] = plgpu.CompilerParams(
            num_warps=t.num_warps, num_stages=t.num_stages
        )
    kernel = functools.partial(
        _kernel,
        sch=sch,
        k=ins.k,
        route=route,
        has_c=C is not None,
        scaled=block_scales is not None and not factors,
        factors=factors,
        shape=(t.bm, t.bn),
    )
    d = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((nb, Mp, Np), jnp.int32),
        grid=(nb, gi * gj),
        in_specs=specs,
        out_specs=d_spec,
        interpret=interpret,
        **kwargs,
    )(*ops)
    bits = lax.bitcast_convert_type(d[:, :M, :N], jnp.uint32)
    return bits.reshape(lead + (M, N))


def fuses_scales() -> bool:
    """Whether the kernel can apply scales (its FMUL / FFMA need this JAX's Pallas Triton
    lowering table, see :func:`._triton_ops.triton_reason`; interpreted, always)."""
    return jax.default_backend() != "gpu" or _triton_ops.triton_reason() is None


def scaled_bits(cfg, Ab, Bb, C, factors, *, interpret=None, tiles: Tiles | None = None):
    """The per-tensor and row-wise scale recipes (:func:`jaxmma.gemm._recipes.scale_bits`)
    in the kernel: the chain's float32 total (from ``C``, or +0 where None) times each of
    ``factors`` in order, one FMUL each (``fma(d, f, -0)``, rounded once).

    ``factors``: uint32 bits, one ``[..., 1, N]`` or scalar per-tensor factor, or
    ``(sb [..., 1, N], sa [..., M, 1])`` row-wise, B's factor first as the recipe orders
    them. What the emulation does after the chain outside any kernel, here costs the GPU
    nothing beyond the kernel's own stores.
    """
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    M, N = Ab.shape[-2], Bb.shape[-1]
    fs = [jnp.asarray(f) for f in factors]
    if not 1 <= len(fs) <= 2:
        raise ValueError(f"factors: expected one or two scale factors, got {len(fs)}")
    col = fs[0].reshape((1, 1)) if fs[0].ndim == 0 else fs[0]
    row = fs[1] if len(fs) == 2 else jnp.ones((1, 1), jnp.uint32)  # unread with one factor
    lead = jnp.broadcast_shapes(Ab.shape[:-2], Bb.shape[:-2], col.shape[:-2], row.shape[:-2])
    col = jnp.broadcast_to(col, lead + (1, N))
    row = jnp.broadcast_to(row, lead + (M, 1))
    return _partition.sharded(
        _gemm_bits, cfg, Ab, Bb, C, scales=(row, col), interpret=interpret, tiles=tiles,
        factors=len(fs),
    )  # fmt: skip


def block_bits(cfg, Ab, Bb, scale_a, scale_b, *, interpret=None, tiles: Tiles | None = None):
    """The block recipe's f32 total (:func:`jaxmma.gemm._recipes.block_groups`, then
    :func:`~jaxmma.gemm._recipes.block_total`) in one kernel: per 128-wide K group the
    chain from +0, then ``total = fma(P_g, f32(sa[i, g] * sb[g, j // 128]), total)``
    (FMUL, then FFMA, each rounded once) from +0.

    ``Ab [..., M, K]``, ``Bb [..., K, N]`` raw bits; ``scale_a [..., M, G]``, ``scale_b
    [..., G, ceil(N / 128)]`` float32 (G = ceil(K / 128)). K is padded with +0 to G * 128
    as the emulation pads it (all its steps run).
    """
    GROUP = _recipes.GROUP
    K, N = Ab.shape[-1], Bb.shape[-1]
    G = -(-K // GROUP)
    Ab = jnp.pad(Ab, [(0, 0)] * (Ab.ndim - 1) + [(0, G * GROUP - K)])
    Bb = jnp.pad(Bb, [(0, 0)] * (Bb.ndim - 2) + [(0, G * GROUP - K), (0, 0)])
    sa = _recipes.bits(scale_a)
    sb = jnp.repeat(_recipes.bits(scale_b), GROUP, axis=-1)[..., :N]
    return gemm_bits(cfg, Ab, Bb, None, interpret=interpret, tiles=tiles, block_scales=(sa, sb))


class Native(Executor):
    """The native executor: its chain, and the scale stages fused into its kernel
    (per-tensor and row-wise where :func:`fuses_scales`, the block recipe always)."""

    name = "native"
    reads_no_c = True

    def covers(self, cfg, scales):
        return cfg.native and scales is None

    def chain(self, cfg, A, B, C, scales):
        return gemm_bits(cfg, A, B, C)

    def fuses(self, stage):
        return stage == "block" or fuses_scales()

    def scaled(self, cfg, A, B, C, factors):
        return scaled_bits(cfg, A, B, C, factors)

    def block(self, cfg, A, B, SA, SB):
        return block_bits(cfg, A, B, SA, SB)
