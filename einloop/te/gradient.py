"""``te.gradient``: reverse-mode differentiation of a compute DAG into more compute DAGs.

The adjoint of every stage is accumulated from its consumers in reverse topological order.  A
consumer ``C[i] = f(..., P[idx(i, r)], ...)`` (``r`` its reduce axes, if it sums) gives ``P`` the
contribution ``dP[p] = sum over the (i, r) with idx(i, r) == p of dC[i] * df/dP[idx]``: the
*gather* form, a compute over ``P``'s shape that reads the adjoint, never a scatter into ``P``.
It is found by solving the read's index map for the consumer's variables (:func:`_invert`):
each index of the read must be affine in the consumer's variables (``i``, ``i + r``, ``2*i + r``,
a constant); a variable it binds is replaced by ``(p - rest) // k``, guarded to its range (and to
divisibility for ``k != 1``), and the variables no index binds stay summed over.  An index that
is affine but for a floor division by a constant (``(i + r) // s``: nearest upsampling) is
solved as ``i + r - t == s * p`` with ``t`` summed over ``0..s-1``.  An index that is not affine
otherwise (``i % 2``, ``i * j``) or reads a tensor (a data-dependent gather) is refused
with a :class:`TEError` naming the stage: its gather form would sum over every output point.
A read the declaration clamped into bounds (:func:`_unclamped`) is solved as the unclamped one.
Each contribution is a stage of its own (``P.grad.C``), summed in ``P.grad`` when there are
several; the forward stages an adjoint needs are recomputed in the gradient's DAG.  A returned
gradient that only crops a sum (a padded input's: the padding's adjoint is a reduction over the
padded shape) is folded into that sum over its own shape (:func:`_fold_crops`).

Derivatives of the elementwise operations (:func:`_diff`) follow the usual calculus; where a
function has a kink, the choice is PyTorch's: ``abs`` has derivative 0 at 0, ``maximum`` and
``minimum`` split the adjoint evenly between equal operands, ``floor``/``ceil`` have none, and
``if_then_else`` sends it to the branch taken (the condition gets none).  A ``max``/``min``
reduction sends the adjoint to the points equal to the extremum, split evenly between ties
(as ``torch.amax`` does; a max-pool written as a ``max`` reduction therefore differs from
``torch.nn.functional.max_pool2d``, which sends a tie to its first point); ``sum`` to every
point; ``prod`` to every point times the product of the other factors (a stage of its own, quadratic in the reduction's extent; no division, so zeros
are exact).  User-defined reducers are refused.  Integer and boolean values carry no gradient.
Sum scatters (the adjoint of the updates gathers the output's at the scattered index) and
multi-output stages (each float output's adjoint flows back through its own part; an argmax's
index has none) are brought back to those rules by :mod:`.gradient_parts`.
"""
from __future__ import annotations

import math

from ..errors import TEError
from ..arith import const_bounds, free_vars, simplify, substitute, walk
from ..arith.linear import Terms, from_linear, terms_of
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp
from ..ir.visit import structural_key
from .compute import _declare
from .scatter import is_scatter
from . import intrin as _intrin
from .dag import ComputeDAG
from .reduce import sum as _sum, max as _max, min as _min, prod as _prod
from .extern import ExternOp
from .tensor import ComputeOp, IterKind, IterVar, Tensor, reduce_axis
from .scan import is_scan, scan_adjoint
from .gradient_parts import multi_output_adjoint, scatter_adjoint


def gradient(output, inputs, head=None):
    """The adjoints of *inputs* for *output*: one tensor per input, of its shape and dtype.

    Parameters
    ----------
    output : Tensor or list of Tensor
        Float tensors computed from *inputs*; with several, the adjoints are summed over them
        (the gradient of a multi-output operator).
    inputs : Tensor or list of Tensor
        The tensors (placeholders, or stages of the DAG) to differentiate with respect to.
    head : Tensor or list of Tensor, optional
        The adjoint of *output* (a tensor of its shape and dtype, e.g. a placeholder for the
        incoming gradient), one per output; ones by default, so that the result is the
        gradient of the sum of *output*'s elements.

    Returns a list of tensors, or one tensor when *inputs* is one.  They are ordinary compute
    DAGs (they recompute the forward stages they need) that ``create_schedule``, ``lower``,
    ``build`` and the auto-scheduler accept.  An input *output* does not depend on gets zeros.
    """
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    outputs = [output] if isinstance(output, Tensor) else list(output) \
        if isinstance(output, (list, tuple)) else None
    if not outputs or not all(isinstance(t, Tensor) for t in outputs):
        raise TEError(f"te.gradient: output must be a tensor or a list of tensors, got "
                      f"{output!r}")
    if not all(isinstance(t, Tensor) for t in inputs):
        raise TEError(f"te.gradient: inputs must be tensors, got {inputs!r}")
    for t in outputs:
        if not dtypes.is_float(t.dtype):
            raise TEError(f"te.gradient: the output {t.name} has dtype {t.dtype}; only a float "
                          "output has a gradient")
    for t in inputs:
        if not dtypes.is_float(t.dtype):
            raise TEError(f"te.gradient: the input {t.name} has dtype {t.dtype}; integer and "
                          "boolean tensors have no gradient")
    contributions = _heads(outputs, head)
    dag = ComputeDAG(outputs)
    wanted = {id(t.op) for t in inputs}
    needed = _needed(dag, wanted)
    adjoints = {}
    for op in reversed(dag.ops):
        if id(op) not in needed:
            continue
        for tensor, part in _adjoint_of(op, contributions, adjoints, needed, dag):
            contributions.setdefault(_key(tensor), []).append(part)
    out = []
    for t in inputs:
        adj = adjoints.get(_key(t))
        if adj is None or adj is _ONES:
            value = E.const(0 if adj is None else 1, t.dtype)
            adj = _declare(f"{t.name}.grad", _fresh_axes(t.shape), value)
        out.append(adj)
    out = _fold_crops(out)
    return out[0] if single else out


def _heads(outputs, head):
    """The adjoints the *outputs* start from (*head*, checked; the constant 1 by default),
    collected where :func:`_key` says."""
    heads = [head] * len(outputs) if head is None else [head] if isinstance(head, Tensor) \
        else list(head) if isinstance(head, (list, tuple)) else [head]
    if len(heads) != len(outputs):
        raise TEError(f"te.gradient: {len(heads)} head(s) for {len(outputs)} output(s); give "
                      "one per output")
    contributions = {}
    for t, h in zip(outputs, heads):
        if h is None:
            h = _ONES          # read as the constant 1: no stage, no buffer
        elif not isinstance(h, Tensor) or tuple(h.shape) != tuple(t.shape) \
                or h.dtype != t.dtype:
            raise TEError(f"te.gradient: head must be a tensor of the output's shape "
                          f"{tuple(t.shape)} and dtype {t.dtype}, got {h!r}")
        contributions.setdefault(_key(t), []).append(h)
    return contributions


def _key(tensor):
    """Where the adjoint of *tensor* is collected: its operation, or, for one output of a
    multi-output stage, the operation and the output."""
    op = tensor.op
    return id(op) if getattr(op, "num_outputs", 1) == 1 else (id(op), tensor.value_index)


def _adjoint_of(op, contributions, adjoints, needed, dag):
    """Sum the contributions to *op*'s outputs into their adjoints (kept in *adjoints*), and
    return ``(tensor, contribution)`` for the tensors *op* reads."""
    keys = [_key(op.output(k)) for k in range(getattr(op, "num_outputs", 1))]
    adjs = [_accumulate(op, contributions.pop(key, []), k if len(keys) > 1 else None)
            for k, key in enumerate(keys)]
    adjoints.update(zip(keys, adjs))
    if all(a is None for a in adjs):
        return []
    if isinstance(op, ExternOp):
        if any(id(t.op) in needed for t in op.inputs):
            raise TEError(f"te.gradient: the gradient flows through {op.name}, an external "
                          f"stage (the C function {op.symbol}), which einloop cannot "
                          "differentiate; differentiate the stages after it with respect to "
                          f"{op.name} and compose with a gradient of your own")
        return []
    if not isinstance(op, ComputeOp):
        return []
    if len(keys) > 1:
        return multi_output_adjoint(op, adjs, needed, _backward, _ONES)
    adj = adjs[0]
    if is_scatter(op):
        return scatter_adjoint(op, adj, needed, _backward, _ONES)
    if is_scan(op):                     # a cumulative sum's adjoint, or a TEError
        head = _declare(f"{op.name}.ones", _fresh_axes(op.shape), E.const(1, op.dtype)) \
            if adj is _ONES else adj
        return scan_adjoint(op, head, [p for p in dag.producers(op) if id(p) in needed])
    return list(_backward(op, adj, needed))


def _fold_crops(grads):
    """*grads* with each one that only crops a sum (``x.grad[r, s] = P[r + 1, s + 1] * g``:
    the adjoint of a padded input, the padding's adjoint a reduction over the padded shape)
    computed as that sum directly over its own, smaller, domain: the same values, without the
    reduction's points that the crop drops (a 3x3 convolution's data gradient over 56 x 56
    instead of 58 x 58) and without a buffer and a kernel for the crop.  Only where the read
    is injective (each axis of the gradient once, plus a constant), so no point is computed
    twice, and the sum is read by nothing else among *grads*."""
    readers = {}
    for g in grads:
        for op in ComputeDAG([g]).compute_ops:
            for t in op.input_tensors:
                readers.setdefault(id(t.op), set()).add(id(op))
    return [_fold_crop(g, readers) for g in grads]


def _fold_crop(g, readers):
    op = g.op
    if not isinstance(op, ComputeOp) or op.reduce_axis:
        return g
    body, factor = op.body, None
    if isinstance(body, E.Binary) and body.op is BinOp.MUL:
        for read, other in ((body.a, body.b), (body.b, body.a)):
            if isinstance(read, E.TensorRead):
                body, factor = read, other
                break
    if not isinstance(body, E.TensorRead):
        return g
    src = body.tensor.op
    if not isinstance(src, ComputeOp) or not isinstance(src.body, E.Reduce) \
            or src.body.reducer is not _sum or readers.get(id(src)) != {id(op)} \
            or (factor is not None and any(r.tensor.op is src for r in walk(factor)
                                            if isinstance(r, E.TensorRead))):
        return g
    own = {id(iv.var) for iv in op.axis}
    used = set()
    for ix in body.indices:
        if ix.dtype != dtypes.INDEX:
            return g
        atoms = [(a, k) for a, k in terms_of(ix).items() if a is not None and k != 0]
        if len(atoms) > 1:
            return g
        if atoms:
            (atom, k), = atoms
            if k != 1 or type(atom) is not E.Var or id(atom) not in own or id(atom) in used:
                return g
            used.add(id(atom))
    if len(used) != len(own):
        return g                        # an axis the read ignores: points computed twice
    mapping = {iv.var: ix for iv, ix in zip(src.axis, body.indices)}
    red = src.body
    source = substitute(red.source, mapping)
    ranges = {iv.var: (0, iv.extent - 1) for iv in op.axis if isinstance(iv.extent, int)}
    if factor is not None and not _guard_holds(factor, ranges):
        source = _mul(source, factor)
    condition = None if red.condition is None else substitute(red.condition, mapping)
    value = E.Reduce(red.reducer, source, red.axes, condition, red.dtype)
    return _declare(op.name, tuple(op.axis), value)


#: The default head: the adjoint of the output is one everywhere.
_ONES = object()


# structure ----------------------------------------------------------------------------------------

def _needed(dag, wanted):
    """ids of the float operations that lie on a path from a wanted input to the output."""
    reach = set()
    for op in dag.ops:                   # post-order: producers first
        floats = any(dtypes.is_float(op.output(k).dtype)
                     for k in range(getattr(op, "num_outputs", 1)))
        if floats and (
                id(op) in wanted or any(id(p) in reach for p in dag.producers(op))):
            reach.add(id(op))
    return reach


def _fresh_axes(shape, names="ijklmnopq", avoid=()):
    """Data axes over *shape*, named from *names*, skipping the names in *avoid*: those of the
    reduce axes the new stage sums over (the auto-scheduler tells loops apart by name)."""
    names = [c for c in names if c not in avoid]
    return tuple(IterVar(E.Var(names[d] if d < len(names) else f"i{d}"), 0, n, IterKind.DATA)
                 for d, n in enumerate(shape))


def _accumulate(op, parts, k=None):
    """The sum of the contributions *parts* to *op*'s adjoint, or to that of its output *k*
    (None when there are none)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    dtype = op.dtype if k is None else op.output_dtype(k)
    axis = _fresh_axes(op.shape)
    idx = tuple(iv.var for iv in axis)
    terms = [E.const(1, dtype) if p is _ONES else p[idx] for p in parts]
    body = terms[0]
    for t in terms[1:]:
        body = body + t
    return _declare(f"{op.name}.grad" if k is None else f"{op.name}.v{k}.grad", axis, body)


# one stage backwards ------------------------------------------------------------------------------

def _backward(op, adj, needed):
    """``(producer tensor, contribution tensor)`` for each read of *op* that needs one."""
    body = op.body
    reducer = body.reducer if isinstance(body, E.Reduce) else None
    if reducer is not None and reducer not in (_sum, _max, _min, _prod):
        raise TEError(f"te.gradient: stage {op.name} reduces with {reducer.name}; only sum, "
                      "prod, max and min reductions can be differentiated")
    source = body.source if reducer is not None else body
    condition = body.condition if reducer is not None else None
    red_axes = tuple(body.axes) if reducer is not None else ()
    out_idx = tuple(iv.var for iv in op.axis)
    seed = E.const(1, op.dtype) if adj is _ONES else adj[out_idx]
    if reducer is _max or reducer is _min:
        seed = _mul(seed, _extremum_share(op, source, condition, red_axes))
    elif reducer is _prod:
        seed = _mul(seed, _other_factors(op, source, condition, red_axes))
    groups = {}
    for r in (x for x in walk(source) if isinstance(x, E.TensorRead)):
        if id(r.tensor.op) not in needed or not dtypes.is_float(r.tensor.dtype):
            continue                    # an integer read (an argmax's index) has no adjoint
        for ix in r.indices:
            if any(isinstance(x, E.TensorRead) for x in walk(ix)):
                raise TEError(f"te.gradient: stage {op.name} reads {r.tensor.name} at the "
                              f"data-dependent index {ix}; a gather by the values of another "
                              "tensor cannot be differentiated")
        groups.setdefault(_read_key(r), r)
    # a sum's adjoint may be read zero-extended instead of guarded (see _gather)
    extendable = adj if (reducer in (None, _sum) and condition is None and adj is not _ONES) \
        else None
    extensions = {}                     # (lows, shape) -> the zero-extended adjoint, one each
    for key, read in groups.items():
        d = _diff(source, key)
        if d is None:
            continue
        yield read.tensor, _gather(op, read, seed, d, condition, red_axes, extendable,
                                   extensions)


def _read_key(r):
    return (id(r.tensor), tuple(structural_key(ix) for ix in r.indices))


def _extremum_share(op, source, condition, red_axes):
    """The factor of a max/min reduction's adjoint at each reduction point: 1/count where the
    source equals the extremum (count: how many points do), 0 elsewhere."""
    out = op.output()[tuple(iv.var for iv in op.axis)]
    hit = source == out
    one, zero = E.const(1, op.dtype), E.const(0, op.dtype)
    axis = _fresh_axes(op.shape, avoid={iv.name for iv in red_axes})
    sub = {old.var: new.var for old, new in zip(op.axis, axis)}
    raxes = [_copy_reduce_axis(iv) for iv in red_axes]
    sub.update({old.var: new.var for old, new in zip(red_axes, raxes)})
    # the reduction's own where= guards the count (it may keep a padded window's reads in bounds)
    where = None if condition is None else substitute(condition, sub)
    count = _declare(f"{op.name}.ties", axis,
                     _sum(E.Select(substitute(hit, sub), one, zero, op.dtype), axis=raxes,
                          where=where))
    return E.Select(hit, one / count[tuple(iv.var for iv in op.axis)], zero, op.dtype)


def _other_factors(op, source, condition, red_axes):
    """The product of a prod reduction's factors at every reduction point but the current one,
    as a read of a new stage over the data and reduction axes.  Computed without dividing, so a
    zero factor is no special case, at the price of one product per reduction point."""
    axis = _fresh_axes(op.shape, avoid={n for iv in red_axes for n in (iv.name, f"{iv.name}_")})
    shifted = tuple(IterVar(E.Var(f"{iv.name}_"), 0, iv.extent, IterKind.DATA) for iv in red_axes)
    raxes = [_copy_reduce_axis(iv) for iv in red_axes]
    sub = {old.var: new.var for old, new in zip(op.axis, axis)}
    sub.update({old.var: new.var for old, new in zip(red_axes, raxes)})
    same = None
    for iv, t, r in zip(red_axes, shifted, raxes):
        eq = _eq(r.var, t.var + iv.start if iv.start else t.var)
        same = eq if same is None else (same & eq)
    one = E.const(1, op.dtype)
    body = E.Select(same, one, substitute(source, sub), op.dtype)
    where = None if condition is None else substitute(condition, sub)
    others = _declare(f"{op.name}.others", axis + shifted, _prod(body, axis=raxes, where=where))
    index = tuple(iv.var for iv in op.axis) + tuple(
        iv.var - iv.start if iv.start else iv.var for iv in red_axes)
    return others[index]


def _gather(op, read, seed, d, condition, red_axes, adj=None, extensions=None):
    """The compute over ``read.tensor``'s shape summing ``seed * d`` over every point of *op*
    (its axes and *red_axes*) that reads the element: the read's index map solved for them.

    Where the solution leaves some of *op*'s points outside its domain (a convolution's data
    gradient near the border, a padded pool's), each such point is guarded.  When *adj* (the
    adjoint of a sum, *seed* its read) is given and *d* reads nothing at the indices so guarded,
    the guards on *op*'s axes give way to a read of the adjoint zero-extended over the range the
    solution covers (:func:`_extended`): the sum is then a plain convolution of it, which
    vectorizes, instead of one test per multiply-add."""
    target = read.tensor
    ranges = {iv.var: iv for iv in tuple(op.axis) + tuple(red_axes)}
    p_axes = _fresh_axes(target.shape, names="pqrstuvwxyz",
                         avoid={iv.name for iv in ranges.values()})
    binding, guards = _invert(op, read, p_axes, ranges)
    free = [iv for v, iv in ranges.items() if v not in binding]
    new_r = [_copy_reduce_axis(iv) for iv in free]
    renamed = {iv.var: nr.var for iv, nr in zip(free, new_r)}
    binding = {v: substitute(e, renamed) for v, e in binding.items()}
    binding.update(renamed)
    guards = [(substitute(g, renamed), v) for g, v in guards]
    extended = None
    guarded = {v for _, v in guards if v is not None}
    if adj is not None and new_r and guarded and not _reads_at(d, guarded):
        extended = _extended(op, adj, binding, tuple(p_axes) + tuple(new_r),
                             {} if extensions is None else extensions)
    if extended is not None:
        ext, lows = extended
        seed = ext[tuple(simplify(binding[iv.var] - lo) if lo else binding[iv.var]
                         for iv, lo in zip(op.axis, lows))]
        guards = [(g, v) for g, v in guards if v is None]
        value = _mul(seed, substitute(d, binding))
    else:
        value = substitute(_mul(seed, d), binding)
    if value.dtype != target.dtype:
        value = value.astype(target.dtype)
    conds = [substitute(g, binding) for g, _ in guards]
    if condition is not None:
        conds.append(substitute(condition, binding))
    cond = None
    for c in conds:
        cond = c if cond is None else (cond & c)
    name = f"{target.name}.grad.{op.name}"
    if new_r:
        body = _sum(value, axis=new_r, where=cond)
    elif cond is not None:
        body = E.Select(cond, value, E.const(0, target.dtype), target.dtype)
    else:
        body = value
    return _declare(name, p_axes, body)


def _reads_at(e, variables) -> bool:
    """Whether *e* reads a tensor at an index that mentions one of *variables*."""
    return any(isinstance(x, E.TensorRead) and any(free_vars(ix) & variables for ix in x.indices)
               for x in walk(e))


def _extended(op, adj, binding, axes, extensions):
    """``(stage, lows)``: *op*'s adjoint zero-extended over the range of *op*'s indices that
    *binding* (each of *op*'s axes as an expression in *axes*) reaches, ``lows`` its lowest
    index per axis; None where a range is not a constant.  *extensions* keeps the stages made
    for *op*'s other reads: one per range, each named apart."""
    known = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in axes
             if isinstance(iv.start, int) and isinstance(iv.extent, int)}
    lows, shape = [], []
    for iv in op.axis:
        b = const_bounds(simplify(binding[iv.var], known), known)
        if b is None or not isinstance(iv.extent, int):
            return None
        lo, hi = min(b[0], iv.start), max(b[1], iv.start + iv.extent - 1)
        lows.append(lo)
        shape.append(hi - lo + 1)
    key = (tuple(lows), tuple(shape))
    if key in extensions:
        return extensions[key], lows
    axis = _fresh_axes(tuple(shape))
    at = [iv.var + lo if lo else iv.var for iv, lo in zip(axis, lows)]
    inside = None
    for x, iv in zip(at, op.axis):
        for c in (x >= iv.start, x < iv.start + iv.extent):
            if not _trivially_true(c, {a.var: (0, n - 1) for a, n in zip(axis, shape)}):
                inside = c if inside is None else (inside & c)
    read = adj[tuple(at)]
    body = read if inside is None else _intrin.if_then_else(inside, read,
                                                            E.const(0, adj.dtype))
    name = f"{op.name}.grad.extended" + (f"{len(extensions)}" if extensions else "")
    extensions[key] = _declare(name, axis, body)
    return extensions[key], lows


def _invert(op, read, p_axes, ranges):
    """Solve ``read.indices == p`` for the variables of *op*: ``(binding, guards)`` with
    ``binding`` var -> expression in the ``p`` variables (and the variables left free) and
    ``guards`` the conditions under which the solution is a point of *op*, each as
    ``(condition, var)``: *var* the data axis of *op* whose range the condition keeps, or
    None (a divisibility, a reduce axis's range, an index the solution must equal)."""
    binding, guards = {}, []
    todo = list(range(len(read.indices)))
    forms = []
    indices = [_unclamped(ix) for ix in read.indices]
    targets = [iv.var for iv in p_axes]
    for d, ix in enumerate(indices):
        if (isinstance(ix, E.Binary) and ix.op is BinOp.FLOORDIV and isinstance(ix.b, E.Const)
                and ix.b.value > 0):
            # e // s == p  <=>  e - t == s * p for the one t in 0..s-1: t is summed over
            step = ix.b.value
            t = IterVar(E.Var(f"t{d}"), 0, step, IterKind.REDUCE)
            ranges[t.var] = t
            indices[d] = ix = ix.a - t.var
            targets[d] = targets[d] * step
        terms = terms_of(ix)
        for atom, k in terms.items():
            if atom is not None and k != 0 and not (type(atom) is E.Var and atom in ranges):
                if isinstance(atom, E.ShapeVar) or not free_vars(atom) & ranges.keys():
                    continue          # a symbolic extent: a constant offset
                raise TEError(
                    f"te.gradient: stage {op.name} reads {read.tensor.name} at {ix} along axis "
                    f"{d}, which is not affine in the stage's indices; only reads at sums of "
                    "multiples of indices plus constants (i, i + r, 2*i + r, 3), or such a sum "
                    "floor-divided by a constant (i // 2), can be differentiated in gather form")
        forms.append({a: k for a, k in terms.items() if k != 0})
    while todo:
        def unbound(d):
            return [v for v in forms[d] if v is not None and type(v) is E.Var and v in ranges
                    and v not in binding]
        d = min(todo, key=lambda d: len(unbound(d)))
        todo.remove(d)
        p = targets[d]
        ix = indices[d]
        cands = unbound(d)
        if not cands:
            guards.append((_eq(p, substitute(ix, binding)), None))
            continue
        v = max(cands, key=lambda v: (_extent_key(ranges[v].extent),
                                      ranges[v].kind is IterKind.DATA))
        k = forms[d][v]
        rest_terms = Terms()
        for atom, c in forms[d].items():
            if atom is not v:
                rest_terms.add(atom, c)
        rest = substitute(from_linear(rest_terms), binding)
        num = (p - rest) if k > 0 else (rest - p)
        if abs(k) != 1:
            guards.append((_eq(num % abs(k), E.const(0)), None))
            sol = num // abs(k)
        else:
            sol = num
        iv = ranges[v]
        kept = v if iv.kind is IterKind.DATA else None
        guards.append((sol >= iv.start, kept))
        guards.append((sol < iv.start + iv.extent, kept))
        binding[v] = sol
    # a binding may mention variables bound later: resolve them
    for _ in range(len(binding)):
        binding = {v: substitute(e, binding) for v, e in binding.items()}
    binding = {v: simplify(e) for v, e in binding.items()}
    guards = [(simplify(substitute(g, binding)), v) for g, v in guards]
    known = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in p_axes + tuple(ranges.values())
             if isinstance(iv.extent, int)}
    return binding, [(g, v) for g, v in guards if not _trivially_true(g, known)]


def _unclamped(ix):
    """*ix* without the clamp into its axis that the declaration puts on a read it cannot prove
    in bounds (:func:`~einloop.ir.expr.clamp_index`; every read of a symbolic shape gets one).
    The clamp keeps an untaken branch from reading outside; where the read is taken it is
    assumed inside, so the solution is guarded to the axis and a point that would read outside
    (which the clamp sends to the edge) gives the edge no gradient."""
    while (isinstance(ix, E.Binary) and ix.op is BinOp.MAX and isinstance(ix.b, E.Const)
           and ix.b.value == 0 and isinstance(ix.a, E.Binary) and ix.a.op is BinOp.MIN):
        ix = ix.a.a         # a declaration's own clamp may be clamped again (symbolic shapes)
    return ix


def _copy_reduce_axis(iv):
    """A new reduce axis over the domain of the axis *iv* (data or reduce)."""
    stop = iv.extent if iv.start == 0 else iv.start + iv.extent
    return reduce_axis((iv.start, stop), name=iv.name)


def _extent_key(extent):
    return extent if isinstance(extent, int) else math.inf


def _eq(a, b):
    return E.compare(E.CmpOp.EQ, a, b)


def _guard_holds(factor, ranges) -> bool:
    """Is *factor* ``select(c, 1, 0)`` (a padding's adjoint: the crop's own guard) with every
    conjunct of ``c`` true at every point of *ranges*, i.e. the factor 1?"""
    if not (isinstance(factor, E.Select) and _is_one(factor.true_value)
            and isinstance(factor.false_value, E.Const) and factor.false_value.value == 0):
        return False
    conjuncts, todo = [], [factor.cond]
    while todo:
        c = todo.pop()
        if isinstance(c, E.Logical) and c.op is E.LogicOp.AND:
            todo += [c.a, c.b]
        else:
            conjuncts.append(c)
    return all(_trivially_true(c, ranges) for c in conjuncts)


def _trivially_true(g, ranges):
    """Whether the guard *g* holds at every point of *ranges* (var -> (lo, hi)): a bound the
    loops already keep."""
    if isinstance(g, E.Const):
        return g.value is True
    if not isinstance(g, E.Compare) or set(free_vars(g)) - set(ranges):
        return False
    b = const_bounds(simplify(g.a - g.b, ranges), ranges)
    if b is None:
        return False
    lo, hi = b
    op = g.op
    return ((op is E.CmpOp.GE and lo >= 0) or (op is E.CmpOp.LT and hi < 0)
            or (op is E.CmpOp.GT and lo > 0) or (op is E.CmpOp.LE and hi <= 0))


# elementwise derivatives ------------------------------------------------------------------------

def _diff(e, key):
    """The derivative of *e* with respect to the reads whose :func:`_read_key` is *key*, or
    None where it is zero."""
    memo = {}

    def d(x):
        got = memo.get(id(x))
        if got is None:
            got = memo[id(x)] = (x, _d(x))
        return got[1]

    def _d(x):
        if not dtypes.is_float(x.dtype):
            return None
        if isinstance(x, E.TensorRead):
            return E.const(1, x.dtype) if _read_key(x) == key else None
        if isinstance(x, (E.Const, E.Var)):
            return None
        if isinstance(x, E.Cast):
            dv = d(x.value)
            return None if dv is None else E.Cast(x.dtype, dv)
        if isinstance(x, E.Select):
            dt, df = d(x.true_value), d(x.false_value)
            if dt is None and df is None:
                return None
            zero = E.const(0, x.dtype)
            return E.Select(x.cond, zero if dt is None else dt, zero if df is None else df,
                            x.dtype)
        if isinstance(x, E.Binary):
            return _d_binary(x, d(x.a), d(x.b))
        if isinstance(x, E.Call):
            return _d_call(x, [d(a) for a in x.args])
        if isinstance(x, E.Reduce):
            raise TEError("te.gradient: a reduction nested inside an expression")
        raise TEError(f"te.gradient: cannot differentiate {x} ({type(x).__name__})")

    return d(e)


def _add(a, b):
    return b if a is None else a if b is None else a + b


def _mul(a, b):
    """``a * b`` with None meaning zero, and without factors of one."""
    if a is None or b is None:
        return None
    if _is_one(a):
        return b
    return a if _is_one(b) else a * b


def _is_one(x):
    return isinstance(x, E.Const) and x.value == 1


def _d_binary(x, da, db):
    a, b = x.a, x.b
    op = x.op
    if da is None and db is None:
        return None
    if op is BinOp.ADD:
        return _add(da, db)
    if op is BinOp.SUB:
        return _add(da, None if db is None else -db)
    if op is BinOp.MUL:
        return _add(_mul(da, b), _mul(a, db))
    if op is BinOp.DIV:
        return _add(None if da is None else da / b,
                    None if db is None else -(a * db) / (b * b))
    if op is BinOp.MAX or op is BinOp.MIN:
        zero = E.const(0, x.dtype)
        da = zero if da is None else da
        db = zero if db is None else db
        wins = a > b if op is BinOp.MAX else a < b
        loses = a < b if op is BinOp.MAX else a > b
        return E.Select(wins, da, E.Select(loses, db, (da + db) * E.const(0.5, x.dtype),
                                           x.dtype), x.dtype)
    raise TEError(f"te.gradient: cannot differentiate the operator {op} in {x}")


def _d_call(x, ds):
    name, args, dt = x.name, x.args, x.dtype
    if name in ("floor", "ceil"):
        return None
    if name == "pow":
        (a, b), (da, db) = args, ds
        return _add(_mul(da, b * _intrin.power(a, b - E.const(1, dt))),
                    _mul(db, x * _intrin.log(a)))
    (a,), (da,) = args, ds
    if da is None:
        return None
    one = E.const(1, dt)
    if name == "exp":
        return _mul(da, x)
    if name == "log":
        return da / a
    if name == "sqrt":
        return da / (E.const(2, dt) * x)
    if name == "tanh":
        return _mul(da, one - x * x)
    if name == "sigmoid":
        return _mul(da, x * (one - x))
    if name == "erf":
        return _mul(da, E.const(2 / math.sqrt(math.pi), dt) * _intrin.exp(-(a * a)))
    if name == "abs":
        zero = E.const(0, dt)
        return E.Select(a > zero, da, E.Select(a < zero, -da, zero, dt), dt)
    raise TEError(f"te.gradient: no derivative for the intrinsic {name} in {x}")
