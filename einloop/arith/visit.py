"""Generic traversal of expression trees: walk, rebuild bottom-up, substitute variables."""
from ..te import expr as E


def children(e):
    if isinstance(e, (E.Binary, E.Compare, E.Logical)):
        return (e.a, e.b)
    if isinstance(e, E.Not):
        return (e.a,)
    if isinstance(e, E.Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, E.Cast):
        return (e.value,)
    if isinstance(e, E.Call):
        return e.args
    if isinstance(e, E.TensorRead):
        return e.indices
    if isinstance(e, E.Reduce):
        return (e.source,) if e.condition is None else (e.source, e.condition)
    index = getattr(e, "index", None)   # loop_ir.Load
    return () if index is None else (index,)


def rebuild(e, kids):
    """A copy of *e* with new children *kids* (same order as :func:`children`)."""
    if all(k is c for k, c in zip(kids, children(e))):
        return e
    if isinstance(e, E.Binary):
        return E.Binary(e.op, kids[0], kids[1], e.dtype)
    if isinstance(e, E.Compare):
        return E.Compare(e.op, kids[0], kids[1])
    if isinstance(e, E.Logical):
        return E.Logical(e.op, kids[0], kids[1])
    if isinstance(e, E.Not):
        return E.Not(kids[0])
    if isinstance(e, E.Select):
        return E.Select(kids[0], kids[1], kids[2], e.dtype)
    if isinstance(e, E.Cast):
        return E.Cast(e.dtype, kids[0])
    if isinstance(e, E.Call):
        return E.Call(e.name, tuple(kids), e.dtype)
    if isinstance(e, E.TensorRead):
        return E.TensorRead(e.tensor, tuple(kids), e.dtype)
    if isinstance(e, E.Reduce):
        return E.Reduce(e.reducer, kids[0], e.axes, kids[1] if len(kids) > 1 else None, e.dtype)
    return type(e)(e.buffer, kids[0], e.dtype)   # loop_ir.Load


def transform(e, fn):
    """Rebuild *e* bottom-up; ``fn(node)`` returns a replacement or None to keep the node."""
    memo = {}

    def go(x):
        got = memo.get(id(x))
        if got is not None:
            return got
        kids = children(x)
        y = rebuild(x, [go(k) for k in kids]) if kids else x
        r = fn(y)
        r = y if r is None else r
        memo[id(x)] = r
        return r
    return go(e)


def substitute(e, mapping):
    """Replace variables by expressions (``mapping``: Var -> Expr)."""
    if not mapping:
        return e
    return transform(e, lambda x: mapping.get(x) if isinstance(x, E.Var) else None)


def walk(e):
    """Yield every node of *e*, parents before children."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def free_vars(e):
    """The set of Vars in *e*."""
    return {x for x in walk(e) if isinstance(x, E.Var)}


def reads_of(e):
    """All TensorRead nodes in *e*."""
    return [x for x in walk(e) if isinstance(x, E.TensorRead)]


def structural_key(e):
    """A hashable key equal for structurally equal expressions (variables by identity)."""
    if isinstance(e, E.Var):
        return ("var", id(e))
    if isinstance(e, E.Const):
        return ("const", e.value, e.dtype)
    head = (type(e).__name__, getattr(e, "op", None), getattr(e, "name", None), e.dtype,
            id(getattr(e, "buffer", None)), id(getattr(e, "tensor", None)))
    return head + tuple(structural_key(c) for c in children(e))
