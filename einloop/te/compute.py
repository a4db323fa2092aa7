"""``te.compute``: declare a tensor by an expression over its indices, with declaration checks."""
from __future__ import annotations

import inspect
import itertools

from ..errors import TEError
from ..arith import walk, simplify, const_bounds, free_vars, negate, refine, substitute
from ..arith.linear import is_affine, terms_of
from ..ir import dtypes
from ..ir import expr as E
from ..ir.expr import BinOp, CmpOp, LogicOp
from .tensor import ComputeOp, IterVar, IterKind, Tensor, check_shape, reduce_axis_of


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
    (``te.sum(..., axis=k)``) as a whole; reading outside a tensor is rejected where it is
    certain and guarded where it cannot be proven impossible.
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
        raise TEError(f"compute {name!r}: the function returned {len(body)} values; einloop "
                      "computes return one expression (declare one compute per output)")
    body = E.as_expr(body)
    reduce_axis = _check_body(name, axis, body)
    body = _guard_reads(name, axis, body)
    return ComputeOp(name, axis, body, reduce_axis, attrs).output()


def _check_body(name, axis, body):
    reduces = [x for x in walk(body) if isinstance(x, E.Reduce)]
    if reduces and (body is not reduces[0] or len(reduces) > 1):
        raise TEError(
            f"compute {name!r}: a reduction must be the whole body of its compute, e.g. "
            f"lambda i: te.sum(A[i, k], axis=k); to use it in further arithmetic, declare the "
            f"reduction as its own compute and read it from a second one (te.max(x, k) and "
            f"te.min(x, k) with a reduce axis k reduce over k; the elementwise forms are "
            f"te.maximum and te.minimum)")
    reduce_axis = body.axes if reduces else ()
    allowed = {iv.var for iv in axis} | {iv.var for iv in reduce_axis}
    for x in walk(body):
        if isinstance(x, E.Var) and x not in allowed:
            iv = reduce_axis_of(x)
            if iv is not None:
                raise TEError(f"compute {name!r}: the reduce axis {x.name} is used outside a "
                              f"reduction over it; wrap the expression in te.sum(..., axis={x.name}) "
                              f"(or te.max/te.min), or list it in that reduction's axis=")
            raise TEError(f"compute {name!r}: the variable {x.name} is not an index of this compute "
                          f"(its indices are {', '.join(iv.name for iv in axis)})")
    return reduce_axis


def _guard_reads(name, axis, body):
    """Reject reads that are out of bounds for sure; clamp reads not provably in bounds."""
    ranges = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in axis}
    if isinstance(body, E.Reduce):
        ranges.update({iv.var: (iv.start, iv.start + iv.extent - 1) for iv in body.axes})
        facts = () if body.condition is None else (body.condition,)
        src = _guard(name, body.source, ranges, facts)
        cond = None if body.condition is None else _guard(name, body.condition, ranges, ())
        return E.Reduce(body.reducer, src, body.axes, cond, body.dtype)
    return _guard(name, body, ranges, ())


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
        return ix if _inside(b, n) else _clamp(ix, n)
    if _inside(b, n):
        return ix
    understood = all(_is_affine_comparison(c) for f in facts for c in _conjuncts(f))
    hit = _witness(simple, known, facts, n) if understood and is_affine(simple) else None
    if hit is not None:
        point, value = hit
        where = f"up to {value}" if value >= n else f"down to {value}"
        at = ", ".join(f"{v.name}={x}" for v, x in point.items())
        raise TEError(
            f"compute {name!r} reads {read} out of bounds: index {ix} along axis {axis} of "
            f"{read.tensor.name} reaches {where} (at {at}), but that axis has extent {n} "
            f"(valid 0..{n - 1}); guard the read with te.if_then_else (e.g. for padding) or "
            f"shrink the compute")
    return _clamp(ix, n)


def _inside(b, n):
    return b is not None and 0 <= b[0] and b[1] < n


def _clamp(ix, n):
    return E.Binary(BinOp.MAX, E.Binary(BinOp.MIN, ix, E.const(n - 1), dtypes.INDEX), E.const(0),
                    dtypes.INDEX)


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

