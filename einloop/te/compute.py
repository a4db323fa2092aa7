"""``te.compute``: declare a tensor by an expression over its indices, with declaration checks."""
from __future__ import annotations

import inspect

from ..errors import TEError
from ..arith import walk, simplify, const_bounds
from ..arith.bounds import refine
from . import dtypes
from . import expr as E
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
            f"reduction as its own compute and read it from a second one")
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


def _negate(c):
    flip = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
    return E.Compare(flip[c.op], c.a, c.b) if isinstance(c, E.Compare) else c


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
        f = _guard(name, e.false_value, ranges, facts + (_negate(e.cond),))
        return E.Select(cond, t, f, e.dtype)
    if isinstance(e, E.TensorRead):
        indices = []
        for axis, ix in enumerate(e.indices):
            ix = _guard(name, ix, ranges, facts)
            indices.append(_check_index(name, e, axis, ix, ranges, facts))
        return E.TensorRead(e.tensor, tuple(indices), e.dtype)
    return transform_children(e, lambda c: _guard(name, c, ranges, facts))


def transform_children(e, fn):
    from ..arith.visit import children, rebuild
    kids = children(e)
    return rebuild(e, [fn(k) for k in kids]) if kids else e


def _check_index(name, read, axis, ix, ranges, facts):
    n = read.tensor.shape[axis]
    known = ranges
    for f in facts:
        known = refine(known, f)
    simple = simplify(ix, known)
    b = _bounds_with_facts(simple, known, facts)
    if b is not None and 0 <= b[0] and b[1] < n:
        return ix
    understood = all(_is_affine_comparison(c) for f in facts for c in _conjuncts(f))
    if understood and b is not None and _is_affine(simple) and (b[1] >= n or b[0] < 0):
        where = f"up to {b[1]}" if b[1] >= n else f"down to {b[0]}"
        raise TEError(
            f"compute {name!r} reads {read} out of bounds: index {ix} along axis {axis} of "
            f"{read.tensor.name} reaches {where}, but that axis has extent {n} (valid 0..{n - 1}); "
            f"guard the read with te.if_then_else (e.g. for padding) or shrink the compute")
    zero = E.const(0)
    return E.Binary("max", E.Binary("min", ix, E.const(n - 1), dtypes.INDEX), zero, dtypes.INDEX)


def _bounds_with_facts(ix, ranges, facts):
    """Bounds of *ix*, tightened by facts of the form ``ix + c < d`` (any comparison)."""
    b = const_bounds(ix, ranges)
    flat = []
    for f in facts:
        flat.extend(_conjuncts(f))
    for f in flat:
        if not isinstance(f, E.Compare) or f.a.dtype != dtypes.INDEX:
            continue
        diff = simplify(ix - (f.a - f.b), ranges)     # ix = (a - b) + diff
        if not isinstance(diff, E.Const):
            continue
        d = diff.value                                  # a - b op 0  =>  ix - d op 0
        lo, hi = (b if b is not None else (None, None))
        if f.op == "<":
            hi = d - 1 if hi is None else min(hi, d - 1)
        elif f.op == "<=":
            hi = d if hi is None else min(hi, d)
        elif f.op == ">":
            lo = d + 1 if lo is None else max(lo, d + 1)
        elif f.op == ">=":
            lo = d if lo is None else max(lo, d)
        b = None if lo is None or hi is None else (lo, hi)
    return b


def _is_affine_comparison(c):
    return (isinstance(c, E.Compare) and c.a.dtype == dtypes.INDEX
            and _is_affine(simplify(c.a)) and _is_affine(simplify(c.b)))


def _conjuncts(c):
    if isinstance(c, E.Logical) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _is_affine(e):
    for x in walk(e):
        if isinstance(x, E.Binary) and x.op not in ("+", "-"):
            if x.op == "*" and (isinstance(x.a, E.Const) or isinstance(x.b, E.Const)):
                continue
            return False
        if not isinstance(x, (E.Binary, E.Var, E.Const)):
            return False
    return True
