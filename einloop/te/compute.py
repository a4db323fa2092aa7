"""``te.compute``: declare a tensor by an expression over its indices, with declaration checks."""
from __future__ import annotations

import inspect
import itertools

from ..errors import InternalError, TEError
from ..arith import (walk, simplify, const_bounds, free_vars, negate, refine, substitute,
                     transform)
from ..arith.linear import is_affine, terms_of
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import CmpOp, LogicOp
from ..ir.visit import structural_key
from ..arith.symbolic import provably_inside
from .symbolic import is_symbolic
from .multi_output import check_parts_whole, check_reduction_parts
from .tensor import ComputeOp, IterVar, IterKind, Tensor, check_shape, reduce_axis_of
from .scan import is_scan_state
from .deferred import defer, deferring


def _param_names(fcompute, ndim, name):
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise TEError(f"compute {name!r}: the function takes {len(params)} index argument(s) but "
                      f"the shape has {ndim} dimension(s); write lambda "
                      f"{', '.join('ijklmn'[:ndim] or 'i')}: ...")
    return [p.name for p in params]


def compute(shape, fcompute, name="compute", attrs=None) -> Tensor:
    """Declare a tensor of *shape* whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    Loop variables are named after the parameters of *fcompute*.  The body may be a reduction
    (``te.sum(..., axis=k)``) or use reductions inside elementwise arithmetic: each nested one
    becomes its own stage (see :func:`_lift_reductions`).  Reading outside a tensor is rejected
    where it is certain and guarded where it cannot be proven impossible.
    """
    name = str(name)
    shape = check_shape(shape, f"compute {name!r}")
    if not callable(fcompute):
        raise TEError(f"compute {name!r}: fcompute must be a function of the indices, "
                      f"got {fcompute!r}")
    names = _param_names(fcompute, len(shape), name)
    axis = tuple(IterVar(E.Var(n), 0, ext, IterKind.DATA) for n, ext in zip(names, shape))
    body = fcompute(*[iv.var for iv in axis])
    if isinstance(body, (list, tuple)):
        return _compute_outputs(name, axis, body, attrs)
    body = E.as_expr(body)
    _check_no_nested_reduction(name, body)
    check_parts_whole(name, body, ())
    if not isinstance(body, E.Reduce):
        # check the variables before lifting, so that an error names the compute declared
        nested = [iv for x in walk(body) if isinstance(x, E.Reduce) for iv in x.axes]
        _check_vars(name, axis, body, nested)
        body = _lift_reductions(name, axis, body)
    return _declare(name, axis, body, attrs)


def _compute_outputs(name, axis, parts, attrs):
    """The tensors of a multi-output compute whose function returned *parts*: all reductions
    over the same axes (one tuple reduction, or several reducers) or all free of a top-level
    reduction (nested ones are lifted into stages of their own, as for one output)."""
    if not parts:
        raise TEError(f"compute {name!r}: the function returned an empty tuple; return one "
                      "expression, or a tuple of them for several outputs")
    parts = tuple(E.as_expr(p) for p in parts)
    for p in parts:
        _check_no_nested_reduction(name, p)
    check_parts_whole(name, parts, parts)
    if any(isinstance(p, E.Reduce) for p in parts):
        check_reduction_parts(name, parts)
        return _declare(name, axis, parts, attrs)
    nested = [iv for x in walk(parts) if isinstance(x, E.Reduce) for iv in x.axes]
    for p in parts:
        _check_vars(name, axis, p, nested)
    return _declare(name, axis, _lift_reductions(name, axis, parts), attrs)


def _declare(name, axis, body, attrs=None):
    """The compute of *body* over *axis*; *body* is a reduction as a whole or holds none (a
    tuple *body*: each part, and the tuple of output tensors is returned)."""
    if isinstance(body, tuple):
        reduce_axis = _check_body(name, axis, body[0])
        for part in body[1:]:
            _check_body(name, axis, part)
        with deferring() as waiting:
            body = tuple(_guard_reads(name, axis, part) for part in body)
        op = ComputeOp(name, axis, body, reduce_axis, attrs)
        op.deferred = tuple(waiting)
        return tuple(op.output(n) for n in range(op.num_outputs))
    reduce_axis = _check_body(name, axis, body)
    with deferring() as waiting:
        body = _guard_reads(name, axis, body)
    op = ComputeOp(name, axis, body, reduce_axis, attrs)
    op.deferred = tuple(waiting)
    return op.output()


def _check_no_nested_reduction(name, body):
    """A reduction inside another reduction's source or condition has no loop of its own to
    run in; the user must give it one."""
    for outer in (x for x in walk(body) if isinstance(x, E.Reduce)):
        parts = (outer.source,) + (() if outer.condition is None else (outer.condition,))
        inner = next((x for p in parts for x in walk(p) if isinstance(x, E.Reduce)), None)
        if inner is not None:
            raise TEError(
                f"compute {name!r}: the reduction {inner.reducer.name} over "
                f"{', '.join(a.name for a in inner.axes)} is inside the body of the reduction "
                f"{outer.reducer.name} over {', '.join(a.name for a in outer.axes)}; a reduction "
                f"cannot contain another one: declare the inner reduction as its own compute "
                f"(with the outer reduce axes as data axes) and read it from the outer one "
                f"(te.max(x, k) and te.min(x, k) with a reduce axis k reduce over k; the "
                f"elementwise forms are te.maximum and te.minimum)")


def _lift_reductions(name, axis, body):
    """*body* with each reduction nested in it replaced by a read of a new compute stage.

    ``te.sum(Q[i, d] * K[j, d], axis=d) * c`` becomes the stage ``L.sum0[i, j]`` (the GEMM) and
    the elementwise ``L.sum0[i, j] * c``: every stage body is then a whole reduction or none,
    which is what scheduling and the DAG analysis rely on.  A lifted stage runs over only the
    data axes its reduction uses, in declaration order (a row sum inside an (i, j) compute is
    computed once per row, not once per element: lifting over all axes would multiply its work
    by the unused extents); a reduction that uses none gets one axis of extent 1.  Structurally
    equal reductions share one stage.
    """
    lifted = {}

    def lift(x):
        if not isinstance(x, E.Reduce):
            return None
        key = structural_key(x)
        if key not in lifted:
            lifted[key] = _lift_one(f"{name}.{x.reducer.name}{len(lifted)}", axis, x)
        return lifted[key]

    return transform(body, lift)


def _lift_one(stage_name, axis, red):
    """A compute stage computing *red* and the read of it at the point of *axis*."""
    used = free_vars(red)
    keep = [iv for iv in axis if iv.var in used]
    if keep:
        new_axis = tuple(IterVar(E.Var(iv.name), iv.start, iv.extent, IterKind.DATA)
                         for iv in keep)
        body = substitute(red, {old.var: new.var for old, new in zip(keep, new_axis)})
        index = [iv.var for iv in keep]
    else:
        new_axis = (IterVar(E.Var("i0"), 0, 1, IterKind.DATA),)
        body, index = red, [E.const(0)]
    stage = _declare(stage_name, new_axis, body)
    return stage[tuple(index)]


def _check_body(name, axis, body):
    reduces = [x for x in walk(body) if isinstance(x, E.Reduce)]
    if reduces and (body is not reduces[0] or len(reduces) > 1):
        raise InternalError(f"compute {name!r}: a reduction left inside arithmetic after lifting")
    reduce_axis = body.axes if reduces else ()
    _check_vars(name, axis, body, reduce_axis)
    return reduce_axis


def _check_vars(name, axis, body, reduce_axis):
    """Every variable of *body* is an index of the compute or one of *reduce_axis*."""
    allowed = {iv.var for iv in axis} | {iv.var for iv in reduce_axis}
    for x in walk(body):
        if isinstance(x, E.Var) and x not in allowed and not isinstance(x, E.ShapeVar):
            iv = reduce_axis_of(x)
            if iv is not None:
                raise TEError(f"compute {name!r}: the reduce axis {x.name} is used outside a "
                              f"reduction over it; wrap the expression in te.sum(..., axis={x.name}) "
                              f"(or te.max/te.min), or list it in that reduction's axis=")
            raise TEError(f"compute {name!r}: the variable {x.name} is not an index of this compute "
                          f"(its indices are {', '.join(iv.name for iv in axis)})")


def _guard_reads(name, axis, body):
    """Reject reads that are out of bounds for sure; clamp reads not provably in bounds."""
    ranges = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in axis}
    if isinstance(body, E.Reduce):
        ranges.update({iv.var: (iv.start, iv.start + iv.extent - 1) for iv in body.axes})
    if any(is_symbolic(hi) for _, hi in ranges.values()) or any(
            is_symbolic(d) for r in walk(body) if isinstance(r, E.TensorRead)
            for d in r.tensor.shape):
        return transform(body, lambda e: _guard_symbolic(e, ranges))
    if isinstance(body, E.Reduce):
        facts = () if body.condition is None else (body.condition,)
        src = _guard(name, body.source, ranges, facts)
        cond = None if body.condition is None else _guard(name, body.condition, ranges, ())
        return E.Reduce(body.reducer, src, body.axes, cond, body.dtype)
    return _guard(name, body, ranges, ())


def _guard_symbolic(e, ranges):
    """A read of *e* with each index clamped unless it is inside its axis for every value of the
    symbolic extents (see :mod:`.symbolic`); None for anything that is not a read.  Nothing is
    rejected: no value of the extents is known to put a read outside."""
    if not isinstance(e, E.TensorRead):
        return None
    indices = []
    for ix, n in zip(e.indices, e.tensor.shape):
        ix = transform(ix, lambda x: _guard_symbolic(x, ranges))
        indices.append(ix if provably_inside(ix, ranges, n) else E.clamp_index(ix, n))
    return E.TensorRead(e.tensor, tuple(indices), e.dtype)


def _guard(name, e, ranges, facts):
    """Check reads in *e*; ``facts`` are the conditions known to hold where *e* is evaluated."""
    if isinstance(e, E.Select):
        cond = _guard(name, e.cond, ranges, facts)
        t = _guard(name, e.true_value, ranges, facts + (e.cond,))
        f = _guard(name, e.false_value, ranges, facts + (negate(e.cond),))
        return E.Select(cond, t, f, e.dtype)
    if isinstance(e, E.TensorRead):
        indices = []
        for axis, ix in enumerate(e.indices):
            ix = _guard(name, ix, ranges, facts)
            indices.append(_check_index(name, e, axis, ix, ranges, facts))
        return E.TensorRead(e.tensor, tuple(indices), e.dtype)
    return transform_children(e, lambda c: _guard(name, c, ranges, facts))


def transform_children(e, fn):
    from ..ir.visit import children, rebuild
    kids = children(e)
    return rebuild(e, [fn(k) for k in kids]) if kids else e


def _check_index(name, read, axis, ix, ranges, facts):
    """*ix*, clamped into the axis unless provably inside it; a TEError if the read certainly
    runs at a point where it is outside."""
    n = read.tensor.shape[axis]
    known = ranges
    for f in facts:
        known = None if known is None else refine(known, f)
    simple = None if known is None else simplify(ix, known)
    b = None if known is None else _bounds_with_facts(simple, known, facts)
    if known is None or (b is not None and b[0] > b[1]):
        # the facts never hold together: the branch never runs, so there is nothing to reject
        b = const_bounds(simplify(ix, ranges), ranges)
        return ix if _inside(b, n) else E.clamp_index(ix, n)
    if _inside(b, n):
        return ix
    understood = all(_is_affine_comparison(c) for f in facts for c in _conjuncts(f))
    # a scan's state is read at earlier steps (t - 1, before row 0 at t = 0): clamped here,
    # not rejected; te.scan checks the read and drops the clamp
    reject = understood and is_affine(simple) and not is_scan_state(read.tensor)
    hit = _witness(simple, known, facts, n) if reject else None
    if hit is not None:
        point, value = hit
        where = f"up to {value}" if value >= n else f"down to {value}"
        at = ", ".join(f"{v.name}={x}" for v, x in point.items())
        at = f" (at {at})" if at else ""        # a point of no variable: say nothing
        error = TEError(
            f"compute {name!r} reads {read} out of bounds: index {ix} along axis {axis} of "
            f"{read.tensor.name} reaches {where}{at}, but that axis has extent {n} "
            f"(valid 0..{n - 1}); guard the read with te.if_then_else (e.g. for padding) or "
            f"shrink the compute" + (f" (if {read.tensor.name} is a scan's state, read at an "
                                     "earlier step, pass it to te.scan as the state)"
                                     if value < 0 and axis == 0 else ""))
        if not (value < 0 and defer(read.tensor.op, error)):
            raise error
    return E.clamp_index(ix, n)


def _inside(b, n):
    return b is not None and 0 <= b[0] and b[1] < n


def _witness(ix, known, facts, n):
    """A point of ``known`` where every fact holds and the affine *ix* is outside ``0..n-1``, as
    ``(point, value)``; None if none of the corners tried is one.

    *ix* is extreme at a corner of the box; variables only the facts use are tried at the corners
    of their ranges (a bounded number of them).
    """
    coeffs = {v: k for v, k in terms_of(ix).items() if v is not None}
    names = set(free_vars(ix)).union(*(free_vars(f) for f in facts))
    if any(v not in known for v in names):
        return None
    others = sorted((v for v in names if v not in coeffs), key=lambda v: v.name)
    for high in (True, False):
        corner = {v: known[v][1] if (k > 0) == high else known[v][0] for v, k in coeffs.items()}
        for values in itertools.islice(itertools.product(*(known[v] for v in others)), 64):
            point = dict(corner)
            point.update(zip(others, values))
            value = _value_at(ix, point)
            if value is not None and not 0 <= value < n \
                    and all(_value_at(f, point) is True for f in facts):
                return point, value
    return None


def _value_at(e, point):
    c = simplify(substitute(e, {v: E.const(x) for v, x in point.items()}))
    return c.value if isinstance(c, E.Const) else None


def _bounds_with_facts(ix, ranges, facts):
    """Bounds of *ix*, tightened by facts of the form ``ix + c < d`` (any comparison)."""
    b = const_bounds(ix, ranges)
    lo, hi = b if b is not None else (None, None)
    for f in (c for f in facts for c in _conjuncts(f)):
        if not isinstance(f, E.Compare) or f.a.dtype != dtypes.INDEX:
            continue
        diff = simplify(ix - (f.a - f.b), ranges)     # ix = (a - b) + diff
        if not isinstance(diff, E.Const):
            continue
        d = diff.value                                  # a - b op 0  =>  ix - d op 0
        op = f.op
        top = d - 1 if op is CmpOp.LT else d if op is CmpOp.LE or op is CmpOp.EQ else None
        bottom = d + 1 if op is CmpOp.GT else d if op is CmpOp.GE or op is CmpOp.EQ else None
        if top is not None:
            hi = top if hi is None else min(hi, top)
        if bottom is not None:
            lo = bottom if lo is None else max(lo, bottom)
    return None if lo is None or hi is None else (lo, hi)


def _is_affine_comparison(c):
    return (isinstance(c, E.Compare) and c.a.dtype == dtypes.INDEX
            and is_affine(simplify(c.a)) and is_affine(simplify(c.b)))


def _conjuncts(c):
    if isinstance(c, E.Logical) and c.op is LogicOp.AND:
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]

