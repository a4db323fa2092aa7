"""Scatter updates: a reduction into an output at indices that may be read from data.

Halide's update definitions over a reduction domain (``hist(clamp(in(r), 0, 255)) += 1``) are
the model.  A scatter has

* an output *shape* and *dtype*, every element first set to *init* (the reducer's identity by
  default: 0 for a sum);
* a reduction domain (``te.reduce_axis`` axes) and, optionally, *free* axes: an output
  dimension whose index is a bare variable of the update (``d`` in ``G[ids[j], d] += dY[j, d]``);
* per point of the free axes and the domain, a target *index* (one expression per output
  dimension, which may read data) and a *value*, combined into the output there by a
  commutative *reducer* (``te.sum``, ``te.max``, ``te.min``, a ``te.comm_reducer``), where the
  optional condition holds.

Bounds.  Every read of the update is checked as a compute's reads are (rejected where it is
certainly outside its tensor, clamped where it is not provably inside).  Each target index is
kept where it is provably inside its output dimension; a target index that reads no data and
certainly leaves the dimension is a TEError; any other one is *clamped* into the dimension, so an
out-of-range index read from data updates the first or last element of that dimension, never
memory outside the output.  To skip such updates instead, guard them with ``where=`` (e.g.
``where=te.all(ids[j] >= 0, ids[j] < V)``).

Sizes.  The output's shape is constant; the domain's extents may be symbolic (``te.var`` /
``te.size_var``: a number of updates, a batch), so that one kernel serves every number of
updates, none included (the output is then its init).

The operation is a :class:`ScatterOp`, a compute whose loops are its free axes (data loops,
which may be split, vectorized and run in parallel like any data loop) and its domain
(reduction loops: two iterations may update the same element, so they run in parallel only once
privatized with ``s.rfactor``, see :mod:`einloop.schedule.scatter`).  Its ``body`` is the update
as a reduction whose source packs the value and the target index into one call
(:func:`pack_update`), so every pass over bodies (reads, inlining, bound inference, hashing)
sees all of them; the scatter lowering unpacks it, and it never reaches code generation.
"""
from __future__ import annotations

import inspect

from ..arith import const_bounds, refine, simplify, walk, free_vars
from ..arith.symbolic import provably_inside
from ..arith.linear import is_affine
from ..errors import TEError
from ..ir import dtypes
from ..ir import expr as E
from .compute import _conjuncts, _guard_reads, _inside, _is_affine_comparison, _witness
from .reduce import CommReducer, sum as _sum
from .tensor import ComputeOp, IterKind, IterVar, Tensor, check_shape, reduce_axis

#: the name of the call that packs a scatter's value and target index (never emitted)
UPDATE_CALL = "scatter_update"


class ScatterOp(ComputeOp):
    """``out[index] = reducer(out[index], value)`` for every point of the free axes (``axis``)
    and the domain (``reduce_axis``) where the condition holds, after ``out[...] = init``.

    ``shape`` is the output's, which in general is not the loops' (``axis`` holds only the free
    axes); ``free_dims[n]`` is the output dimension that free axis ``n`` indexes.
    """

    def __init__(self, name, shape, free, domain, index, value, reducer, cond, init):
        body = E.Reduce(reducer, pack_update(value, index), tuple(domain), cond, value.dtype)
        super().__init__(name, free, body, domain)
        self.shape = tuple(shape)
        self.init = init
        self.free_dims = tuple(next(d for d, ix in enumerate(index) if ix is iv.var)
                               for iv in free)

    @property
    def reducer(self):
        return self.body.reducer

    def __repr__(self):
        return f"scatter({self.name}, {self.shape}, {self.dtype})"


def remade(op, axis, body, reduce_axis, attrs=None) -> ComputeOp:
    """Compute *op* rebuilt with new loops and body (from a rewrite of its own), of its own
    kind: the te rewriters (dtype promotion, binding symbolic sizes, partitioning) rebuild
    computes through it, so that a scatter stays a scatter (its shape, and its init in the
    body's dtype)."""
    if not is_scatter(op):
        return ComputeOp(op.name, axis, body, reduce_axis, attrs)
    value, index, cond = unpack_update(body)
    init = E.const(op.init.value, value.dtype)
    return ScatterOp(op.name, op.shape, axis, reduce_axis, index, value, body.reducer, cond, init)


def is_scatter(op) -> bool:
    """Is *op* (an operation, or a stage's op) a scatter?"""
    return isinstance(op, ScatterOp)


def pack_update(value, index) -> E.Call:
    """The value and the target index of an update as one expression (see the module doc)."""
    return E.Call(UPDATE_CALL, (value,) + tuple(index), value.dtype)


def unpack_update(body):
    """``(value, index, condition)`` of a scatter's body (a Reduce over a packed update)."""
    call = body.source
    return call.args[0], tuple(call.args[1:]), body.condition


def update_text(op) -> str:
    """Scatter *op* as one line: ``H = 0; H[index] sum= value where cond`` (free axes as
    indices, the domain over which it runs given by the caller)."""
    value, index, cond = unpack_update(op.body)
    where = "" if cond is None else f" where {cond}"
    return (f"{op.name} = {op.init}; {op.name}[{', '.join(map(str, index))}] "
            f"{op.reducer.name}= {value}{where}")


# the general form -----------------------------------------------------------------------------

def scatter_reduce(shape, fupdate, reducer=_sum, axis=None, where=None, init=None, dtype=None,
                   name="scatter") -> Tensor:
    """Declare a tensor of *shape* built by updates at data-dependent indices.

    Parameters
    ----------
    shape : tuple of int
        The output's shape (constant extents).
    fupdate : callable
        ``fupdate(*free) -> (index, value)``: the target index (a tuple, one integer expression
        per output dimension) and the value of one update.  Its parameters are the free axes,
        named after them: each must be the whole index of exactly one output dimension, whose
        extent it runs over (``lambda d: ((ids[j], d), dY[j, d])``).  Use no parameter for
        none (``lambda: ((X[r],), 1)``).
    reducer : CommReducer
        How an update combines with the element: ``te.sum`` (default), ``te.max``, ``te.min``
        or a ``te.comm_reducer``.
    axis : reduce axis or list of them
        The reduction domain the updates run over (``te.reduce_axis``; its extents may be
        symbolic).
    where : expression or callable, optional
        Only points where it holds update (a callable takes the free axes like *fupdate*).
    init : number, optional
        Every element's value before the updates; the reducer's identity by default.
    dtype : str, optional
        The output's dtype; by default the value's (a Python number value then needs it).
    """
    name = str(name)
    ctx = f"scatter {name!r}"
    shape = _constant_shape(check_shape(shape, ctx), ctx)
    domain = _domain(axis, ctx)
    if not isinstance(reducer, CommReducer):
        raise TEError(f"{ctx}: reducer must be te.sum, te.max, te.min or a te.comm_reducer, "
                      f"got {reducer!r}")
    if not callable(fupdate):
        raise TEError(f"{ctx}: fupdate must be a function of the free axes returning "
                      f"(index, value), got {fupdate!r}")
    params = _params(fupdate, ctx)
    free_vars_ = [E.Var(p) for p in params]
    index, value = _call_update(fupdate, free_vars_, ctx)
    index = _index_exprs(index, shape, ctx)
    free = _free_axes(free_vars_, index, shape, ctx)
    dtype = value.dtype if dtype is None and isinstance(value, E.Expr) else dtype
    if dtype is None:
        raise TEError(f"{ctx}: the value {value!r} is a Python number; give the output's "
                      "dtype= (e.g. dtype='int32')")
    dtype = dtypes.canonical(dtype, ctx)
    value = _value(value, dtype, ctx)
    cond = _condition(where, free_vars_, ctx)
    init = _init(init, reducer, dtype, ctx)
    reducer(value, axis=list(domain))       # the reducer's own checks (bool values, combine)
    _check_vars(free, domain, (value, cond) + index, ctx)
    return _declare(name, shape, free, domain, index, value, reducer, cond, init)


def _declare(name, shape, free, domain, index, value, reducer, cond, init) -> Tensor:
    """Guard the reads and the target index, then make the operation."""
    packed = E.Reduce(reducer, pack_update(value, index), tuple(domain), cond, value.dtype)
    guarded = _guard_reads(name, free, packed)
    value, index, cond = unpack_update(guarded)
    ranges = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in tuple(free) + domain}
    facts = () if cond is None else tuple(_conjuncts(cond))
    index = tuple(_target_index(name, shape, d, ix, ranges, facts, free)
                  for d, ix in enumerate(index))
    return ScatterOp(name, shape, free, domain, index, value, reducer, cond, init).output()


def _constant_shape(shape, ctx):
    if not all(isinstance(d, int) for d in shape):
        raise TEError(f"{ctx}: the output shape {shape} has a symbolic extent; a scatter's "
                      "output has constant extents")
    return shape


def _domain(axis, ctx):
    if axis is None:
        raise TEError(f"{ctx}: axis= is missing: give the reduction domain the updates run "
                      "over, e.g. r = te.reduce_axis((0, n), name='r') and axis=r")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes:
        raise TEError(f"{ctx}: axis= is empty; give at least one te.reduce_axis")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
            raise TEError(f"{ctx}: axis {a!r} is not a reduction axis; create it with "
                          "te.reduce_axis((0, n), name='r')")
    if len(set(map(id, axes))) != len(axes):
        raise TEError(f"{ctx}: an axis is listed twice in axis=")
    return axes


def _params(fn, ctx):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TEError(f"{ctx}: cannot read the parameters of fupdate {fn!r}; pass a lambda "
                      "or a def") from None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise TEError(f"{ctx}: fupdate takes *args; name each free axis as a parameter")
    return [p.name for p in params]


def _call_update(fupdate, free_vars_, ctx):
    got = fupdate(*free_vars_)
    if not isinstance(got, tuple) or len(got) != 2:
        raise TEError(f"{ctx}: fupdate must return (index, value), a pair, got {got!r}")
    index, value = got
    if isinstance(index, Tensor) or not isinstance(index, (tuple, list)):
        index = (index,)
    return tuple(index), value


def _index_exprs(index, shape, ctx):
    if len(index) != len(shape):
        raise TEError(f"{ctx}: the target index has {len(index)} expression(s) but the output "
                      f"has {len(shape)} dimension(s) {shape}; give one index per dimension")
    out = []
    for d, ix in enumerate(index):
        if isinstance(ix, IterVar):
            ix = ix.var
        ix = E.as_expr(ix)
        if not dtypes.is_int(ix.dtype):
            raise TEError(f"{ctx}: the target index {ix} of dimension {d} has dtype "
                          f"{ix.dtype}; indices must be integers (cast with .astype('int64'))")
        out.append(ix if ix.dtype == dtypes.INDEX else ix.astype(dtypes.INDEX))
    return tuple(out)


def _free_axes(free_vars_, index, shape, ctx):
    """One data axis per parameter of fupdate, over the output dimension it indexes."""
    free = []
    for v in free_vars_:
        dims = [d for d, ix in enumerate(index) if ix is v]
        if len(dims) != 1:
            said = "indexes no dimension" if not dims else \
                f"indexes dimensions {dims}"
            raise TEError(f"{ctx}: the free axis {v.name} {said}; each parameter of fupdate "
                          "must be the whole index of exactly one output dimension (as d in "
                          "lambda d: ((ids[j], d), dY[j, d])); a variable used otherwise "
                          "belongs in the reduction domain (te.reduce_axis)")
        free.append(IterVar(v, 0, shape[dims[0]], IterKind.DATA))
    return tuple(free)


def _value(value, dtype, ctx):
    if isinstance(value, Tensor):
        raise TEError(f"{ctx}: the value is the tensor {value.name}; index it (e.g. "
                      f"{value.name}[j, d])")
    if not isinstance(value, E.Expr):
        try:
            return E.as_expr(value, like=dtype)
        except TEError as exc:
            raise TEError(f"{ctx}: the value {value!r} does not fit dtype {dtype}: {exc}") \
                from None
    if value.dtype != dtype:
        raise TEError(f"{ctx}: the value {value} has dtype {value.dtype} but the output's is "
                      f"{dtype}; cast it with .astype('{dtype}') or give dtype='{value.dtype}'")
    return value


def _condition(where, free_vars_, ctx):
    if where is None:
        return None
    if callable(where) and not isinstance(where, E.Expr):
        where = where(*free_vars_)
    cond = E.as_expr(where)
    if cond.dtype != dtypes.BOOL:
        raise TEError(f"{ctx}: where= must be a condition, got {cond} of dtype {cond.dtype}")
    return cond


def _init(init, reducer, dtype, ctx):
    if init is None:
        return reducer.identity(dtype)
    if isinstance(init, E.Expr) and not isinstance(init, E.Const):
        raise TEError(f"{ctx}: init= must be a number, got the expression {init}")
    value = init.value if isinstance(init, E.Const) else init
    try:
        return E.const(value, dtype)
    except TEError as exc:
        raise TEError(f"{ctx}: init={value!r} is not a {dtype} value: {exc}") from None


def _check_vars(free, domain, exprs, ctx):
    allowed = {iv.var for iv in tuple(free) + tuple(domain)}
    for e in exprs:
        if e is None:
            continue
        for v in free_vars(e):
            if v not in allowed and not isinstance(v, E.ShapeVar):
                raise TEError(f"{ctx}: the variable {v.name} is neither a free axis (a "
                              "parameter of fupdate) nor in axis= (the reduction domain: "
                              f"{', '.join(iv.name for iv in domain)})")


def _target_index(name, shape, d, ix, ranges, facts, free):
    """*ix*, kept where provably inside dimension *d*, else clamped into it; a TEError where
    it reads no data and certainly leaves it (no update could land there)."""
    n = shape[d]
    if any(ix is iv.var for iv in free):
        return ix
    if free_vars(ix) & {v for v, (lo, hi) in ranges.items()
                        if not (isinstance(lo, int) and isinstance(hi, int))}:
        # over a domain of symbolic extent: no interval (nor witness) of constants; kept
        # where provably inside for every size, else clamped
        return ix if provably_inside(ix, ranges, n) else E.clamp_index(ix, n)
    known = ranges
    for f in facts:
        known = None if known is None else refine(known, f)
    if known is None:                    # the condition never holds: nothing is written
        return E.clamp_index(ix, n)
    simple = simplify(ix, known)
    if _inside(const_bounds(simple, known), n):
        return ix
    reads_data = any(isinstance(x, E.TensorRead) for x in walk(ix))
    understood = all(_is_affine_comparison(c) for c in facts)
    hit = None if reads_data or not understood or not is_affine(simple) \
        else _witness(simple, known, facts, n)
    if hit is not None:
        point, value = hit
        at = ", ".join(f"{v.name}={x}" for v, x in point.items())
        raise TEError(f"scatter {name!r} writes out of bounds: its target index {ix} along "
                      f"dimension {d} reaches {value} (at {at}), but that dimension has extent "
                      f"{n} (valid 0..{n - 1}); shrink the domain or guard with where=")
    return E.clamp_index(ix, n)


# ready-made operators ---------------------------------------------------------------------------

def scatter_add(shape, index, updates, axis=0, name="scatter_add") -> Tensor:
    """``out[..., index[j], ...] += updates[..., j, ...]`` along dimension *axis*, zeros elsewhere
    (``np.add.at``, PyTorch's ``index_add`` on zeros).  *index* is a 1-D integer tensor of
    length ``N``; *updates* has *shape* with dimension *axis* replaced by ``N``.  Repeated
    indices add up; an index outside ``0..shape[axis]-1`` is clamped (see the module doc)."""
    ctx = f"scatter_add {name!r}"
    shape = _constant_shape(check_shape(shape, ctx), ctx)
    if not isinstance(index, Tensor) or not isinstance(updates, Tensor):
        raise TEError(f"{ctx}: index and updates must be tensors, got {index!r}, {updates!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(shape):
        raise TEError(f"{ctx}: axis must be a dimension of the output, 0..{len(shape) - 1}, "
                      f"got {axis!r}")
    if index.ndim != 1 or not dtypes.is_int(index.dtype):
        raise TEError(f"{ctx}: index must be a 1-D integer tensor, got {index.shape} "
                      f"{index.dtype}")
    want = shape[:axis] + (index.shape[0],) + shape[axis + 1:]
    if not _same_shape(updates.shape, want):
        raise TEError(f"{ctx}: updates has shape {updates.shape}, but an output of shape "
                      f"{shape} scattered along axis {axis} by {index.shape[0]} indices needs "
                      f"{want}")
    j = reduce_axis((0, index.shape[0]), name="j")
    names = [f"i{d}" for d in range(len(shape)) if d != axis]

    def update(*free):
        rest = list(free)
        target = tuple(rest[:axis]) + (index[j],) + tuple(rest[axis:])
        source = tuple(rest[:axis]) + (j,) + tuple(rest[axis:])
        return target, updates[source]
    return scatter_reduce(shape, _named(update, names), _sum, axis=j, name=name)


def histogram(data, bins, weights=None, dtype="int32", name="histogram") -> Tensor:
    """Counts of the values of the integer tensor *data* in ``bins`` bins (``np.bincount`` with
    ``minlength=bins``), or sums of *weights* (same shape as *data*) per value.  A value outside
    ``0..bins-1`` is counted in the nearest bin (clamped, as Halide's ``hist(clamp(in(r), 0,
    255)) += 1``); ``te.scatter_reduce`` with ``where=`` skips them instead."""
    ctx = f"histogram {name!r}"
    if not isinstance(data, Tensor) or not dtypes.is_int(data.dtype):
        raise TEError(f"{ctx}: data must be an integer tensor (quantize floats first), got "
                      f"{data!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise TEError(f"{ctx}: bins must be a positive integer, got {bins!r}")
    domain = [reduce_axis((0, n), name=f"r{d}") for d, n in enumerate(data.shape)]
    point = tuple(domain)
    if weights is not None:
        if not isinstance(weights, Tensor) or not _same_shape(weights.shape, data.shape):
            raise TEError(f"{ctx}: weights must be a tensor of the data's shape "
                          f"{data.shape}, got {weights!r}")
        dtype = weights.dtype
    value = 1 if weights is None else weights[point]
    clamped = E.clamp_index(data[point].astype(dtypes.INDEX), bins)
    return scatter_reduce((bins,), lambda: ((clamped,), value), _sum, axis=domain,
                          dtype=dtype, name=name)


def embedding_backward(ids, grad, num_embeddings, padding_idx=None,
                       name="embedding_grad") -> Tensor:
    """The gradient of an embedding lookup with respect to its table: ``G[ids[b...], d] +=
    grad[b..., d]`` over every position ``b...`` of *ids* (``np.add.at(G, ids, grad)``), a
    ``(num_embeddings, D)`` tensor.  Repeated ids add up; an id outside the table is clamped
    (as :func:`einloop.nn.embedding` clamps the lookup).  Positions whose id is *padding_idx*
    contribute nothing (PyTorch's ``padding_idx``: that row's gradient stays 0)."""
    ctx = f"embedding_backward {name!r}"
    if not isinstance(ids, Tensor) or not dtypes.is_int(ids.dtype):
        raise TEError(f"{ctx}: ids must be an integer tensor, got {ids!r}")
    if not isinstance(grad, Tensor) or not _same_shape(grad.shape[:-1], ids.shape):
        raise TEError(f"{ctx}: grad must have the ids' shape {ids.shape} plus the feature "
                      f"dimension, got {getattr(grad, 'shape', grad)!r}")
    if padding_idx is not None and (isinstance(padding_idx, bool)
                                    or not isinstance(padding_idx, int)):
        raise TEError(f"{ctx}: padding_idx must be an int or None, got {padding_idx!r}")
    domain = [reduce_axis((0, n), name=f"b{d}") for d, n in enumerate(ids.shape)]
    point = tuple(domain)
    kept = None if padding_idx is None else ids[point] != padding_idx
    return scatter_reduce((num_embeddings, grad.shape[-1]),
                          lambda d: ((ids[point], d), grad[point + (d,)]), _sum,
                          axis=domain, where=kept, name=name)


def _same_shape(a, b) -> bool:
    """Do shapes *a* and *b* agree: equal ints, or the same symbolic extent (two different
    ``te.var``s may differ at the call, so they do not agree)?"""
    return len(a) == len(b) and all(
        x is y or (isinstance(x, int) and isinstance(y, int) and x == y) for x, y in zip(a, b))


def _named(fn, names):
    """*fn* (taking ``*free``) as a function whose parameters are called *names*, so the free
    loops are named after them."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]

    def wrapper(*args):
        return fn(*args)
    wrapper.__signature__ = inspect.Signature(params)
    return wrapper
