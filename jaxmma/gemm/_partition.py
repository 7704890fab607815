"""How a Pallas GEMM executor is split over devices: as XLA splits a dot.

A ``pallas_call`` is opaque to XLA's SPMD partitioner, which therefore runs it replicated:
every device gathers the whole of A, B and C and computes the whole of D. :func:`sharded`
wraps an executor's raw-bit GEMM (``fn(cfg, A, B, C, **static)`` with ``A [..., M, K]``,
``B [..., K, N]``, ``C [..., M, N]`` or None) in :func:`jax.experimental.custom_partitioning`
with the rule of a dot:

- D is sharded along its batch dimensions (as A's, else B's, else C's are), along M as
  A's rows (else C's) and along N as B's columns (else C's); a mesh axis serves one
  dimension only (the first of batch, M, N that asks for it);
- K is never split: A's and B's K are gathered (replicated) first. A split K would chain
  partial sums in another order, other bits;
- A, B and C are resharded to these shardings, and every device runs ``fn`` unchanged on
  its blocks. Each element of D reads its own row of A and column of B in full K (and its
  own element of C), so a device's block has the one-device bits whatever the tiling pads.

``vmap`` moves the mapped axis in front as one more batch dimension (the executors
broadcast leading dimensions), so the partitioned call is never batched by JAX itself
(``custom_partitioning`` has no batching rule).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _axes(entry) -> tuple:
    """The mesh axes of one entry of a ``PartitionSpec`` (None, a name or a tuple)."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _spec(sharding, ndim: int) -> tuple:
    spec = tuple(getattr(sharding, "spec", None) or ())
    spec = tuple(None if e is P.UNCONSTRAINED else e for e in spec)
    return spec + (None,) * (ndim - len(spec))


def out_spec(specs, nbatch: int) -> tuple:
    """D's partition spec (batch..., M, N) from those of A, B (and C): batch as any
    operand has it, M as A's rows (else C's), N as B's columns (else C's); a mesh axis
    used once."""
    a, b = specs[0], specs[1]
    c = specs[2] if len(specs) > 2 else (None,) * (nbatch + 2)
    used: set = set()

    def take(*entries):
        for e in entries:
            ax = _axes(e)
            if ax and not used & set(ax):
                used.update(ax)
                return e
        return None

    batch = tuple(take(a[i], b[i], c[i]) for i in range(nbatch))
    m = take(a[nbatch], c[nbatch])
    n = take(b[nbatch + 1], c[nbatch + 1])
    return batch + (m, n)


def _mesh(mesh, arg_shapes):
    for s in arg_shapes:
        if isinstance(s.sharding, NamedSharding):
            return s.sharding.mesh
    return mesh


def _rule_kwargs(nbatch: int, has_c: bool, has_scales: bool = False) -> dict:
    """The Shardy rule: batch and M, N pass through, K (``k``) and the scale groups
    (``g``) are never sharded."""
    bt = [f"b{i}" for i in range(nbatch)]
    dims = [bt + ["m", "k"], bt + ["k", "n"]] + ([bt + ["m", "n"]] if has_c else [])
    if has_scales:
        dims += [bt + ["m", "g"], bt + ["g", "n"]]
    rule = ", ".join(" ".join(d) for d in dims) + " -> " + " ".join(bt + ["m", "n"])
    return {"sharding_rule": rule, "need_replication_factors": ("k", "g") if has_scales else ("k",)}


@functools.lru_cache(maxsize=256)
def _partitioned(fn, cfg, nbatch: int, has_c: bool, static: tuple, has_scales: bool = False):
    """``(A, B[, C][, SA, SB]) -> D`` bits, partitioned as a dot; ``fn`` runs on each
    device's blocks (leading dimensions already broadcast to a common shape of rank
    ``nbatch``). ``SA [..., M, G]`` follows A's rows, ``SB [..., G, N]`` B's columns."""
    kw = dict(static)

    def run(*args):
        a, b, *rest = args
        c = rest.pop(0) if has_c else None
        if has_scales:
            return fn(cfg, a, b, c, block_scales=tuple(rest), **kw)
        return fn(cfg, a, b, c, **kw)

    @custom_partitioning
    def op(*args):  # (a jit holds the kernel's constants: custom_partitioning takes none)
        return jax.jit(run)(*args)

    def infer(mesh, arg_shapes, result_shape):
        specs = [_spec(s.sharding, nbatch + 2) for s in arg_shapes][: 3 if has_c else 2]
        return NamedSharding(_mesh(mesh, arg_shapes), P(*out_spec(specs, nbatch)))

    def partition(mesh, arg_shapes, result_shape):
        mesh = _mesh(mesh, arg_shapes)
        specs = [_spec(s.sharding, nbatch + 2) for s in arg_shapes][: 3 if has_c else 2]
        *batch, m, n = out_spec(specs, nbatch)
        out = NamedSharding(mesh, P(*batch, m, n))
        rows, cols = (
            NamedSharding(mesh, P(*batch, m, None)),
            NamedSharding(mesh, P(*batch, None, n)),
        )
        args = [rows, cols] + ([out] if has_c else []) + ([rows, cols] if has_scales else [])
        return mesh, jax.jit(run), out, tuple(args)

    try:
        op.def_partition(
            partition, infer_sharding_from_operands=infer,
            **_rule_kwargs(nbatch, has_c, has_scales),
        )  # fmt: skip
    except TypeError:  # a jax without need_replication_factors: K left to ``partition``
        rule = _rule_kwargs(nbatch, has_c, has_scales)["sharding_rule"]
        op.def_partition(partition, infer_sharding_from_operands=infer, sharding_rule=rule)

    @custom_vmap
    def call(*args):
        return op(*args)

    @call.def_vmap
    def _vmap(axis_size, in_batched, *args):
        moved = []
        for x, batched in zip(args, in_batched, strict=True):
            x = x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
            moved.append(x)
        return _partitioned(fn, cfg, nbatch + 1, has_c, static, has_scales)(*moved), True

    return call


def sharded(fn, cfg, A, B, C, scales=None, **static):
    """``fn(cfg, A, B, C, **static)`` (raw bits, leading dimensions broadcasting; C may be
    None; ``scales``: ``(SA [..., M, G], SB [..., G, N])`` passed as ``block_scales=``),
    partitioned over devices as XLA partitions a dot (see the module's text): D sharded
    along batch, M and N, never K, with one device's bits."""
    xs = [A, B] + ([] if C is None else [C]) + list(scales or ())
    lead = tuple(jnp.broadcast_shapes(*(x.shape[:-2] for x in xs)))
    ops = [jnp.broadcast_to(x, lead + x.shape[-2:]) for x in xs]
    key = tuple(sorted(static.items()))
    return _partitioned(fn, cfg, len(lead), C is not None, key, scales is not None)(*ops)
