"""``with_policy``: a JAX function run with its dots on the GEMMs a policy chooses.

The function is traced to a jaxpr (``jax.make_jaxpr``) at the arguments of each call and
the jaxpr is evaluated one equation at a time with JAX's own primitives, so the result
is an ordinary JAX computation: ``jit``, ``grad`` and ``vmap`` apply to it as to any
function, and a replaced dot differentiates by its target's rule (the straight-through
GEMM of ``jaxmma.dot_general``, a recipe's backward GEMMs). Every ``dot_general`` is
matched against the rules (``einsum``, ``@``, ``jnp.dot`` and flax / equinox layers all
trace to it); calls (``jit``, ``closed_call``) are evaluated inline, ``checkpoint`` as a
checkpoint, ``scan``, ``cond`` and ``while`` rebuilt around their evaluated bodies; a
dot anywhere else is refused (docs/policy.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal, get_args

import jax
import numpy as np
from jax.extend import core as jcore

from .. import util
from . import _rules, _state, _stats, _targets

Unmatched = Literal["keep", "error"]
Unused = Literal["error", "ignore"]
Unsupported = Literal["error", "keep"]
UNMATCHED: tuple[str, ...] = get_args(Unmatched)
UNUSED: tuple[str, ...] = get_args(Unused)
UNSUPPORTED: tuple[str, ...] = get_args(Unsupported)
#: contractions jaxmma does not emulate: refused unless ``unsupported="keep"``
OTHER_CONTRACTIONS = ("conv_general_dilated", "ragged_dot", "ragged_dot_general")
#: calls evaluated inline (the same values; the jit boundary is dropped)
_INLINE = ("pjit", "jit", "closed_call", "core_call")
#: primitives whose output is their input moved or cast: an argument's path goes through
_PATH_THROUGH = ("convert_element_type", "reshape", "transpose", "squeeze", "expand_dims",
                 "copy", "copy_p", "reduce_precision")  # fmt: skip
_DOTS = ("dot_general",) + OTHER_CONTRACTIONS


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")
    return value


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _render(path) -> str:
    """A pytree key path inside its argument (the argument's own index or name left
    out) as "a/b/c"."""
    return "/".join(_key_name(k) for k in path[2:])


def _scope(name_stack) -> tuple:
    """The named scopes of a name stack, transformations (``jvp``, ``vmap``) left out."""
    out: list[str] = []
    for s in getattr(name_stack, "stack", ()):
        if type(s).__name__ == "Scope":
            out.extend(p for p in str(s.name).split("/") if p)
    return tuple(out)


class _Run:
    """One evaluation: the rules, what they matched, the dots seen."""

    def __init__(self, rules, unmatched, unsupported, explain=False, threaded=None, stats=False):
        self.rules, self.unmatched, self.unsupported = rules, unmatched, unsupported
        self.explain = explain
        self.stats = {} if stats else None  # dot index -> {"x": Stats, "w": Stats}
        self.threaded = threaded if threaded is not None else _state.Threaded(False)
        self.hits = [0] * len(rules)
        self.dots = []
        self.targets = []  # the target of each dot, beside ``dots``
        self.inside = ()  # the loops and branches around the equation evaluated

    def choose(self, dot):
        for i, (label, rule) in enumerate(self.rules):
            if rule.matches(dot):
                self.hits[i] += 1
                return label, rule.target
        if self.unmatched == "error":
            raise ValueError(
                f"policy: {dot} matches no rule (unmatched='error'); rules: "
                f"{[label for label, _ in self.rules]}; add a rule for it, e.g. "
                "Rule(None, 'keep') last"
            )
        return None, _targets.KEEP


def _dot(e, ins, paths, scope, run):
    lhs, rhs = (v.aval for v in e.invars[:2])
    out = e.outvars[0].aval
    dot = _rules.Dot(
        index=len(run.dots), scope="/".join(scope), lhs_path=paths[0], rhs_path=paths[1],
        lhs=jax.ShapeDtypeStruct(lhs.shape, lhs.dtype),
        rhs=jax.ShapeDtypeStruct(rhs.shape, rhs.dtype),
        dimension_numbers=e.params["dimension_numbers"], out_dtype=np.dtype(out.dtype),
    )  # fmt: skip
    label, target = run.choose(dot)
    run.dots.append(dataclasses.replace(dot, rule=label))
    run.targets.append(target)
    if target == _targets.KEEP or run.explain:
        return util.bind(e, ins)
    where = f"policy: rule {label!r} on {dot}"
    state, key, no_key = run.threaded.inputs(where, dot, target, run.inside)
    weight = _targets.weight_side(dot)

    def f(lhs, rhs, state):
        return _targets.run(target, lhs, rhs, dot.dimension_numbers, state, key, weight)

    if no_key is not None:  # inference: the forward's bits; the gradient refused
        f = _state.forward_only(f, no_key)
    try:
        D = f(ins[0], ins[1], state)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{where}: {err}") from err
    if run.stats is not None and _stats.has_stats(target):
        if run.inside:
            raise ValueError(
                f"{where}: statistics of a dot inside {run.inside[-1]!r} are not "
                "collected (its body is traced as a function of its own, run any number "
                "of times); move the dot out, or take the statistics of the body as a "
                "function of its own"
            )
        x, w = _targets.recipe_operands(ins[0], ins[1], dot.dimension_numbers, weight)
        run.stats[dot.index] = _stats.operand_stats(target, x, w, state)
    return [D.astype(out.dtype)]


def _refuse(e, scope, why):
    where = "/".join(scope) or "(no scope)"
    raise ValueError(f"fn: primitive {e.primitive.name!r} at {where!r}: {why}")


def _eval(jaxpr, consts, args, paths, scope, run):
    env, penv = {}, {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    def path(v):
        return "" if isinstance(v, jcore.Literal) else penv.get(v, "")

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x, p in zip(jaxpr.invars, args, paths, strict=True):
        env[v], penv[v] = x, p
    for e in jaxpr.eqns:
        ins = [read(v) for v in e.invars]
        in_paths = [path(v) for v in e.invars]
        name = e.primitive.name
        here = scope + _scope(e.source_info.name_stack)
        if name == "dot_general":
            outs = _dot(e, ins, in_paths, here, run)
        elif name in OTHER_CONTRACTIONS:
            if run.unsupported == "error":
                _refuse(e, here, "a contraction jaxmma does not emulate; unsupported='keep' "
                        "keeps it as written")  # fmt: skip
            outs = util.bind(e, ins)
        elif not any(util.contains(j, _DOTS) for j in util.sub_jaxprs(e)):
            outs = util.bind(e, ins)
        else:
            outs = _nested(e, ins, in_paths, here, run)
        for v, x in zip(e.outvars, outs, strict=True):
            env[v] = x
        if name in _PATH_THROUGH and in_paths and in_paths[0]:
            penv[e.outvars[0]] = in_paths[0]
    return [read(v) for v in jaxpr.outvars]


def _nested(e, ins, paths, scope, run):
    """An equation holding jaxprs with dots inside, evaluated with the policy."""
    name = e.primitive.name

    def call(closed_jaxpr, args, arg_paths=None):
        j, c = util.closed(closed_jaxpr)
        return _eval(j, c, list(args), arg_paths or [""] * len(args), scope, run)

    outer = run.inside
    if name not in _INLINE:  # its jaxprs are traced below, as functions of their own
        run.inside = outer + (name,)
    try:
        return _rebuild(e, ins, paths, scope, call)
    finally:
        run.inside = outer


def _rebuild(e, ins, paths, scope, call):
    """``e`` rebuilt around its jaxprs, each evaluated by ``call``."""
    name, p = e.primitive.name, e.params
    if name in _INLINE:
        j = p[util.CALLS[name]]
        return call(j, ins, paths)
    if name in ("checkpoint", "remat", "remat2"):
        f = functools.partial(call, p["jaxpr"], arg_paths=paths)
        ckpt = jax.checkpoint(lambda *xs: f(xs), prevent_cse=p["prevent_cse"], policy=p["policy"])
        return list(ckpt(*ins))
    if name == "scan":
        nc, ncarry = p["num_consts"], p["num_carry"]
        consts, init, xs = ins[:nc], ins[nc : nc + ncarry], ins[nc + ncarry :]

        def body(carry, x):
            outs = call(p["jaxpr"], (*consts, *carry, *x), (*paths[:nc], *[""] * (ncarry + len(x))))
            return outs[:ncarry], outs[ncarry:]

        carry, ys = jax.lax.scan(
            body, list(init), list(xs), length=p["length"], reverse=p["reverse"],
            unroll=p["unroll"],
        )  # fmt: skip
        return [*carry, *ys]
    if name == "cond":
        index, ops = ins[0], ins[1:]
        branches = [
            functools.partial(lambda b, *xs: call(b, xs, paths[1:]), b) for b in p["branches"]
        ]
        return list(jax.lax.switch(index, branches, *ops))
    if name == "while":
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cc, bc, init = ins[:cn], ins[cn : cn + bn], ins[cn + bn :]
        return list(
            jax.lax.while_loop(
                lambda c: call(p["cond_jaxpr"], (*cc, *c))[0],
                lambda c: call(p["body_jaxpr"], (*bc, *c)),
                list(init),
            )
        )
    if name in ("custom_jvp_call", "custom_vjp_call"):
        called = f" {p['name']!r}" if "name" in p else ""
        _refuse(e, scope, f"a dot inside a function{called} with a custom derivative: its "
                "rule would not see the policy's GEMMs; apply the policy inside the "
                "function, or move the dot out of it")  # fmt: skip
    _refuse(e, scope, "a dot inside this primitive is not covered (covered: jit calls, "
            "checkpoint, scan, cond, while_loop)")  # fmt: skip


def _dynamic(x) -> bool:
    """Leaves traced as arrays (as ``jax.jit`` traces them); others are held static."""
    return isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def _evaluate(fn, run, args, kwargs, abstract=False):
    leaves, tree = jax.tree_util.tree_flatten_with_path((args, kwargs))
    dyn = [i for i, (_, x) in enumerate(leaves) if _dynamic(x)]
    values = [x for _, x in leaves]

    def flat_fn(*xs):
        full = list(values)
        for i, x in zip(dyn, xs, strict=True):
            full[i] = x
        a, k = jax.tree_util.tree_unflatten(tree, full)
        return fn(*a, **k)

    xs = [values[i] for i in dyn]
    closed, shape = jax.make_jaxpr(flat_fn, return_shape=True)(*xs)
    paths = [_render(leaves[i][0]) for i in dyn]
    evaluate = functools.partial(_eval, closed.jaxpr, closed.consts, paths=paths, scope=(), run=run)
    if abstract:  # the walk alone: traced, nothing computed
        jax.make_jaxpr(lambda *a: evaluate(list(a)))(*xs)
        return None, []
    outs = evaluate(xs)
    unused = [label for (label, _), n in zip(run.rules, run.hits, strict=True) if n == 0]
    return jax.tree.unflatten(jax.tree.structure(shape), outs), unused


def with_policy(
    fn: Callable[..., Any],
    policy: _rules.Policy,
    *,
    unmatched: Unmatched = "keep",
    unused: Unused = "error",
    unsupported: Unsupported = "error",
    stateful: bool = False,
) -> Callable[..., Any]:
    """``fn`` with each of its dots run on the jaxmma GEMM that ``policy`` chooses.

    At each call ``fn`` is traced to a jaxpr and evaluated with every ``dot_general``
    (``@``, ``jnp.dot``, ``einsum``, flax and equinox layers) matched against the rules
    in order: the first that matches runs it on its target (``jaxmma.dot_general`` with
    the rule's instruction, arch and options, or a recipe's GEMMs), rounded once to the
    dot's own output dtype; ``"keep"`` leaves it as written. The rest of ``fn`` runs as
    JAX runs it. The result is jit-able, vmap-able and differentiable: a replaced dot
    differentiates by its target's rule (docs/policy.md).

    Args:
      fn: a JAX function; its arguments are pytrees whose array and number leaves are
        traced (as ``jax.jit`` traces them) and whose other leaves (functions, strings)
        are held as they are. A model passed as an argument gives its dots operand paths
        (flax nnx, equinox); one closed over does not.
      policy: a sequence of :class:`jaxmma.policy.Rule` (a bare target in it matches
        every dot), or one rule, or one target (:func:`jaxmma.policy.gemm`, a recipe, a
        :mod:`jaxmma.presets` entry, ``"keep"``).
      unmatched: what a dot no rule matches does: ``"keep"`` (default: it stays as
        written) or ``"error"`` (ValueError naming the dot).
      unused: ``"error"`` (default: a rule that matched no dot of a call is a ValueError
        naming it; a mistyped path shows so) or ``"ignore"``.
      unsupported: contractions jaxmma does not emulate (``conv_general_dilated``,
        ``ragged_dot``): ``"error"`` (default, ValueError naming it) or ``"keep"``.
      stateful: False (default): the result takes ``fn``'s arguments; a dot whose
        target keeps state (``recipes.delayed_scaling()``) is refused, and one whose
        target draws random numbers in its backward (stochastic gradient rounding, the
        NVFP4 Hadamard signs) runs its forward only (its gradient is a ValueError).
        True: the result is ``run(state, key, *args, **kwargs)``, with ``state`` the
        dict of :func:`jaxmma.policy.init_state` (one entry ``"dot<i>"`` per dot keeping
        state, whose next value is its cotangent: ``jax.grad`` with respect to
        ``state`` gives it, as for a recipe called by hand) and ``key`` the step's
        ``jax.random`` key or None (inference): dot ``i`` draws from
        ``jax.random.fold_in(key, i)``, ``i`` its index in :func:`jaxmma.policy.dots`.

    Returns:
      A function with ``fn``'s arguments and outputs (``stateful=True``: ``state`` and
      ``key`` first).

    Raises:
      TypeError, ValueError: a malformed policy (now); at trace time, a dot a rule's
        target cannot run (the message names rule and dot), an unmatched dot with
        ``unmatched="error"``, a rule that matched nothing with ``unused="error"``, a dot
        inside a custom derivative or a primitive not covered, an unsupported
        contraction with ``unsupported="error"``; a dot keeping state without
        ``stateful=True`` or inside ``scan``, ``while_loop`` or ``cond``, a state entry
        missing or one no dot reads, a dot drawing in a loop; a dot whose forward draws
        (``gemm(..., rounding="stochastic")``) without a key; when differentiated, a dot
        whose backward draws without a key.

    Example:
      >>> import jax, jax.numpy as jnp, jaxmma
      >>> from jaxmma import presets
      >>> def mlp(w1, w2, x):
      ...     return jax.nn.relu(x @ w1) @ w2
      >>> f = jaxmma.with_policy(mlp, presets.H100_BF16)
      >>> jax.jit(f)(jnp.ones((32, 16)), jnp.ones((16, 8)), jnp.ones((4, 32))).shape
      (4, 8)
    """
    return _policied(fn, policy, unmatched, unused, unsupported, stateful, stats=False)


def _policied(fn, policy, unmatched, unused, unsupported, stateful, stats):
    """``with_policy``'s function; with ``stats``, it returns ``(output, statistics)``."""
    rules = _rules.as_rules(policy)
    _choice("unmatched", unmatched, UNMATCHED)
    _choice("unused", unused, UNUSED)
    _choice("unsupported", unsupported, UNSUPPORTED)
    if not isinstance(stateful, bool):
        raise TypeError(f"stateful: expected True or False, got {stateful!r}")

    def call(threaded, args, kwargs):
        run = _Run(rules, unmatched, unsupported, threaded=threaded, stats=stats)
        out, left = _evaluate(fn, run, args, kwargs)
        if left and unused == "error":
            raise ValueError(
                f"policy: rules {left} matched no dot of fn (unused='error'); check their "
                "paths with jaxmma.policy.dots(fn, policy)(*args)"
            )
        threaded.check_used()
        if not stats:
            return out
        keys = _stats.names([run.dots[i] for i in run.stats])
        return out, dict(zip(keys, run.stats.values(), strict=True))

    if stateful:

        def run_stateful(state, key, *args, **kwargs):
            return call(_state.Threaded(True, state, key), args, kwargs)

        # fn's name, not its signature: this one takes (state, key) first
        run_stateful.__name__ = getattr(fn, "__name__", run_stateful.__name__)
        return run_stateful

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return call(_state.Threaded(False), args, kwargs)

    return run


def stats(
    fn: Callable[..., Any],
    policy: _rules.Policy,
    *,
    unmatched: Unmatched = "keep",
    unused: Unused = "error",
    unsupported: Unsupported = "error",
    stateful: bool = False,
) -> Callable[..., tuple[Any, dict[str, Any]]]:
    """``fn`` under ``policy`` (as :func:`jaxmma.with_policy`), returning with its output
    the numerics statistics of each dot on a low-precision recipe.

    ``stats(fn, policy)(*args, **kwargs)`` is ``(out, statistics)``: ``out`` is
    ``with_policy(fn, policy)(*args, **kwargs)``, bit for bit, and ``statistics`` a dict
    with one entry per dot whose target is a recipe of :mod:`jaxmma.recipes` that casts
    to fp8, MX or NVFP4 (not ``bf16()``; GEMM targets and kept dots have none), keyed by
    the dot's first name (:attr:`jaxmma.policy.Dot.names`: its scope, else an operand's
    path; a name shared by several dots gets ``" (dot <i>)"``). Each entry is
    ``{"x": Stats, "w": Stats}``: :func:`jaxmma.recipes.stats` of the recipe's
    activations x ``[M, K]`` and weights w ``[K, N]`` (as the policy hands the dot to
    the recipe) under its formats and the scales of its forward casts (docs/policy.md,
    "Statistics"). Jit-able; under ``jax.value_and_grad(..., has_aux=True)`` the
    statistics are the aux of a training step (the operands are read, not
    differentiated).

    Args:
      fn, policy, unmatched, unused, unsupported: as :func:`jaxmma.with_policy`.
      stateful: as :func:`jaxmma.with_policy`: True gives ``run(state, key, *args,
        **kwargs)``, the delayed-scaling scales from ``state``'s amax histories.

    Returns:
      A function with ``fn``'s arguments (``stateful=True``: ``state`` and ``key``
      first) returning ``(fn's output, {name: {"x": Stats, "w": Stats}})``.

    Raises:
      TypeError, ValueError: as :func:`jaxmma.with_policy`; at trace time, a dot on a
        recipe inside ``scan``, ``cond``, ``while_loop`` or ``checkpoint`` (traced as a
        function of its own: its statistics are not collected).

    Example:
      >>> import jax, jax.numpy as jnp, jaxmma
      >>> from jaxmma import recipes
      >>> def f(params, x):
      ...     return x @ params["hidden"]
      >>> params = {"hidden": jnp.full((32, 8), 2.0**-12)}
      >>> x = jnp.ones((4, 32)).at[0, 0].set(1e-9)
      >>> y, st = jax.jit(jaxmma.policy.stats(f, recipes.current_scaling()))(params, x)
      >>> sorted(st), int(st["hidden"]["x"].underflow), int(st["hidden"]["w"].size)
      (['hidden'], 1, 256)
    """
    return _policied(fn, policy, unmatched, unused, unsupported, stateful, stats=True)


def dots(
    fn: Callable[..., Any],
    policy: _rules.Policy | None = None,
    *,
    unsupported: Unsupported = "error",
) -> Callable[..., list[_rules.Dot]]:
    """The dots of ``fn`` as a policy sees them, and the rule each one matches.

    ``dots(fn, policy)(*args, **kwargs)`` traces ``fn`` at the arguments (no GEMM runs)
    and returns a list of :class:`jaxmma.policy.Dot`, in evaluation order, each with its
    names (module path, operand paths), shapes, dtypes and the label of the rule that
    matched it (``Dot.rule``; None without a policy or where no rule matched): the way
    to write and check a policy's paths.

    Example:
      >>> import jax.numpy as jnp, jaxmma
      >>> def f(params, x):
      ...     return x @ params["head"]
      >>> [d.rhs_path for d in jaxmma.policy.dots(f)({"head": jnp.ones((4, 2))},
      ...                                             jnp.ones((3, 4)))]
      ['head']
    """
    rules = _rules.as_rules(policy) if policy is not None else ()
    _choice("unsupported", unsupported, UNSUPPORTED)

    def run(*args, **kwargs):
        r = _Run(rules, "keep", unsupported, explain=True)
        _evaluate(fn, r, args, kwargs, abstract=True)
        return list(r.dots)

    return run


def init_state(
    fn: Callable[..., Any], policy: _rules.Policy, *, unsupported: Unsupported = "error"
) -> Callable[..., dict[str, Any]]:
    """The initial state of ``fn`` under ``policy``, for ``with_policy(fn, policy,
    stateful=True)``.

    ``init_state(fn, policy)(*args, **kwargs)`` traces ``fn`` at the arguments (no GEMM
    runs) and returns a dict with one entry per dot whose target keeps state: the name
    ``"dot<i>"`` (``i`` the dot's index, as :func:`jaxmma.policy.dots` lists it) and the
    target's :meth:`~jaxmma.recipes.Recipe.init` (delayed scaling: ``{"x", "w", "g"}``
    amax histories, float32 zeros). Empty where no dot keeps state.

    Example:
      >>> import jax.numpy as jnp, jaxmma
      >>> from jaxmma import recipes
      >>> def f(w, x):
      ...     return x @ w
      >>> s = jaxmma.policy.init_state(f, recipes.delayed_scaling(history=4))(
      ...     jnp.ones((32, 16)), jnp.ones((8, 32)))
      >>> sorted(s), s["dot0"]["g"].shape
      (['dot0'], (4,))
    """
    rules = _rules.as_rules(policy)
    _choice("unsupported", unsupported, UNSUPPORTED)

    def run(*args, **kwargs):
        r = _Run(rules, "keep", unsupported, explain=True)
        _evaluate(fn, r, args, kwargs, abstract=True)
        return {
            _state.state_name(d.index): _state.init(t)
            for d, t in zip(r.dots, r.targets, strict=True)
            if _state.keeps_state(t)
        }

    return run
