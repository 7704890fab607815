"""fp8 scaling recipes as GEMM kernels apply them (measured on an H100, docs/gemm.md).

``scale_a`` / ``scale_b`` (float32 arrays beside A and B) name the recipe by their shapes:

* per-tensor, ``()`` and ``()`` (``torch._scaled_mm`` with scalar scales):
  ``D = out(acc * f32(sa * sb))``, the two scales multiplied first, once after the chain;
* row-wise, ``[M, 1]`` and ``[1, N]`` (torchao's float8 rowwise):
  ``D = out((acc * sb[j]) * sa[i])``, B's scale first (an f32 output shows the order:
  ``acc * f32(sa[i] * sb[j])`` matches only about two thirds of the elements);
* block, ``[M, ceil(K / 128)]`` and ``[ceil(K / 128), ceil(N / 128)]`` (DeepSeek-V3 /
  DeepGEMM: 1x128 activation and 128x128 weight scales): per 128-wide K group g, the chain
  over the group from +0 gives ``P_g``; ``total = fma(P_g, f32(sa[i, g] * sb[g, j // 128]),
  total)`` from +0, one rounding each; ``D = out(total)``.

Leading batch dimensions broadcast with A's and B's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..arith import ffma_f32, fmul_f32

GROUP = 128  # elements of K per block scale (DeepSeek-V3: 1x128 and 128x128)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def recipe(scale_a, scale_b, M: int, K: int, N: int, lead: tuple = ()) -> str | None:
    """``"tensor"``, ``"row"``, ``"block"`` or None; TypeError / ValueError naming the
    argument when the scales are not float32 arrays of one recipe's shapes, or when their
    batch dimensions do not broadcast to A's and B's (``lead``)."""
    if scale_a is None and scale_b is None:
        return None
    for name, s, other in (("scale_a", scale_a, "scale_b"), ("scale_b", scale_b, "scale_a")):
        if s is None:
            raise ValueError(f"{name}: missing; {other} was given (the recipes scale both)")
        dt = jnp.result_type(s)
        if dt != jnp.float32:
            raise TypeError(f"{name}: expected float32 scales, got {dt}")
    sa, sb = jnp.shape(scale_a), jnp.shape(scale_b)
    G, GN = _cdiv(K, GROUP), _cdiv(N, GROUP)
    if sa == () and sb == ():
        return "tensor"
    if len(sa) >= 2 and len(sb) >= 2:
        for name, shape in (("scale_a", sa), ("scale_b", sb)):
            try:
                ok = tuple(jnp.broadcast_shapes(shape[:-2], tuple(lead))) == tuple(lead)
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"{name}: batch dimensions {shape[:-2]} do not broadcast to A's and B's "
                    f"{tuple(lead)} (shape {shape})"
                )
        if sa[-2:] == (M, 1) and sb[-2:] == (1, N):
            return "row"
        if sa[-2:] == (M, G) and sb[-2:] == (G, GN):
            return "block"
    raise ValueError(
        "scale_a, scale_b: expected the shapes of one recipe: per-tensor () and (); "
        f"row-wise [M, 1] = [{M}, 1] and [1, N] = [1, {N}]; block [M, ceil(K/128)] = "
        f"[{M}, {G}] and [ceil(K/128), ceil(N/128)] = [{G}, {GN}]; got {sa} and {sb}"
    )


def bits(x):
    """float32 values -> their uint32 bits."""
    return jax.lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)


def scale_bits(kind: str, scale_a, scale_b) -> tuple:
    """The f32 factors that multiply the accumulator, in order (broadcastable to
    ``[..., M, N]``): ``(f32(sa * sb),)`` per tensor, ``(sb, sa)`` row-wise."""
    sa, sb = bits(scale_a), bits(scale_b)
    if kind == "row":
        return (sb, sa)
    return (fmul_f32(sa, sb),)


def factor_a(kind: str, scale_a, K: int):
    """A's scales as a factor of A ``[..., M, K]`` (for derivatives; linear in them)."""
    if kind in ("tensor", "row"):
        return scale_a
    return jnp.repeat(scale_a, GROUP, axis=-1)[..., :K]


def factor_b(kind: str, scale_b, K: int, N: int):
    """B's scales as a factor of B ``[..., K, N]`` (for derivatives; linear in them)."""
    if kind in ("tensor", "row"):
        return scale_b
    return jnp.repeat(jnp.repeat(scale_b, GROUP, axis=-2), GROUP, axis=-1)[..., :K, :N]


def block_groups(Ab, Bb, zero):
    """The block recipe's chains as one batch: K padded with +0 to whole 128-wide groups,
    ``(a [G, ..., M, 128], b [G, ..., 128, N], c [G, ..., M, N])``, each group's chain
    from ``zero`` (raw bits); :func:`block_total` takes their D."""
    K, N = Ab.shape[-1], Bb.shape[-1]
    G = _cdiv(K, GROUP)
    pad = G * GROUP - K
    Ab = jnp.pad(Ab, [(0, 0)] * (Ab.ndim - 1) + [(0, pad)])
    Bb = jnp.pad(Bb, [(0, 0)] * (Bb.ndim - 2) + [(0, pad), (0, 0)])
    a = jnp.moveaxis(Ab.reshape(Ab.shape[:-1] + (G, GROUP)), -2, 0)  # [G, ..., M, 128]
    b = jnp.moveaxis(Bb.reshape(Bb.shape[:-2] + (G, GROUP, N)), -3, 0)  # [G, ..., 128, N]
    return a, b, jnp.broadcast_to(zero, (G,) + zero.shape)


def block_total(P, scale_a, scale_b):
    """The block recipe's f32 total (raw bits ``[..., M, N]``) from the groups' chains
    ``P [G, ..., M, N]`` (:func:`block_groups`; the leading dimensions those of A and B,
    broadcast alike): per group one FMUL of the scales, one FFMA into the total."""
    G, N = P.shape[0], P.shape[-1]
    lead = P.shape[1:-2]  # scales with fewer batch dimensions than A and B: broadcast
    scale_a = jnp.broadcast_to(scale_a, lead + jnp.shape(scale_a)[-2:])
    scale_b = jnp.broadcast_to(scale_b, lead + jnp.shape(scale_b)[-2:])
    sa = jnp.moveaxis(bits(scale_a), -1, 0)[..., None]  # [G, ..., M, 1]
    sb = jnp.repeat(bits(scale_b), GROUP, axis=-1)[..., :N]  # [..., G, N]
    sb = jnp.moveaxis(sb, -2, 0)[..., None, :]  # [G, ..., 1, N]
    s = fmul_f32(sa, sb)

    def step(total, x):
        p, sg = x
        return ffma_f32(p, sg, total), None

    shape = jnp.broadcast_shapes(P.shape[1:], s.shape[1:])

    def expand(x):  # [G, ...] -> [G, *shape] (batch dimensions the scales lack: 1)
        x = x.reshape((G,) + (1,) * (len(shape) + 1 - x.ndim) + x.shape[1:])
        return jnp.broadcast_to(x, (G,) + shape)

    P, s = expand(P), expand(s)
    total, _ = jax.lax.scan(step, jnp.zeros(shape, jnp.uint32), (P, s))
    return total
