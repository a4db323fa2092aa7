"""``te.scan``: tensors computed step by step along one axis, each step reading earlier ones.

A scan declares ``state[t] = init[t]`` for the first rows and ``state[t] = update(t)`` after
them, where the update reads the state at earlier steps (``state[t - 1, i]``): cumulative sums
and products, recurrences such as an IIR filter ``y[t] = a * y[t - 1] + x[t]``.  TVM's API::

    state = te.scan_state((T, M), name="state")      # or te.placeholder, see below
    init = te.compute((1, M), lambda _, i: X[0, i])
    update = te.compute((T, M), lambda t, i: state[t - 1, i] + X[t, i])
    csum = te.scan(init, update, state)

How it is represented: each state becomes a :class:`ScanOp`, a compute whose body reads its own
output at earlier steps, ``csum[t, i] = select(t < 1, init[t, i], csum[t - 1, i] + X[t, i])``.
Evaluated by a loop nest that runs the scan axis serially (in increasing order for every point
of the other axes), that body computes the scan in place, so the stage schedules, bounds and
lowers as any compute; :mod:`einloop.schedule.scan` adds what must hold for the order (the scan
axis is never split, vectorized or parallel; reads at other points of the previous step need the
scan loop outside the others).  Several states (``te.scan([i0, i1], [u0, u1], [s0, s1])``) are
one op per state in one loop nest: the first, the *leader*, owns the loops and stores every
state at each point; the others are its *partners*.

The update's reads of a state are checked here: a state declared with :func:`scan_state` may be
read at ``t - 1``, which ``te.compute`` clamps instead of rejecting it as out of bounds at
``t = 0``; this module drops the clamp.  A ``te.placeholder`` state, as TVM writes it, works
the same way: ``te.compute`` holds its error for a read before the placeholder's start
(:mod:`.deferred`), and :func:`scan` accepts the held errors of its states' reads and raises any
other.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from ..errors import TEError
from ..arith import simplify, transform, substitute
from ..arith.symbolic import provably_inside
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import reads_of
from .deferred import raise_deferred
from .tensor import ComputeOp, IterKind, IterVar, PlaceholderOp, Tensor, check_shape


class ScanStateOp(PlaceholderOp):
    """The placeholder standing for a scan's state in its update (see :func:`scan_state`)."""


def scan_state(shape, dtype="float32", name="state") -> Tensor:
    """A scan's state: a placeholder that the update may read at earlier steps (``t - 1``).

    ``te.scan`` replaces it by the scan's output.  ``te.compute`` clamps a read of it that may
    fall outside its shape, as any other, but does not reject one that surely does (``t - 1``
    at ``t = 0``); ``te.scan`` checks the read (an earlier step, within the rows the init
    provides) and drops the clamp.
    """
    shape = check_shape(shape, f"scan_state {name!r}")
    dtype = dtypes.canonical(dtype, f"scan_state {name!r}")
    return ScanStateOp(str(name), shape, dtype).output()


def is_scan_state(tensor) -> bool:
    """Is *tensor* declared by :func:`scan_state` (its reads are checked by ``te.scan``)?"""
    return isinstance(getattr(tensor, "op", None), ScanStateOp)


class ScanOp(ComputeOp):
    """One state of a scan: a compute whose body reads its own output at earlier steps.

    ``scan_dim`` is the position of the scan axis (``scan_axis``, an IterVar of ``axis``), the
    others are ``spatial_axes``; ``init_rows`` steps come from the init.  ``group`` holds every
    state of the scan, the leader (which owns the loops) first.
    """

    def __init__(self, name, axis, dtype, scan_dim, init_rows, attrs=None):
        super().__init__(name, axis, E.const(0, dtype), (), attrs)
        self.scan_dim = scan_dim
        self.init_rows = init_rows
        self.group = (self,)

    @property
    def scan_axis(self) -> IterVar:
        return self.axis[self.scan_dim]

    @property
    def spatial_axes(self) -> tuple:
        return tuple(iv for d, iv in enumerate(self.axis) if d != self.scan_dim)

    @property
    def leader(self) -> ScanOp:
        return self.group[0]

    @property
    def input_tensors(self):
        """What the scan reads besides its own states.  The leader reads what every state
        reads (its loops compute them all); a partner reads the leader first, so the DAG orders
        it after the leader, then what its own body reads."""
        seen = [] if self is self.leader else [self.leader.output()]
        for op in self.group if self is self.leader else (self,):
            for r in reads_of(op.body):
                own = isinstance(r.tensor.op, ScanOp) and r.tensor.op.leader is self.leader
                if not own and r.tensor not in seen:
                    seen.append(r.tensor)
        return tuple(seen)

    def __repr__(self):
        return f"scan({self.name}, {self.shape}, {self.dtype}, axis {self.scan_dim})"


def is_scan(op) -> bool:
    """Is *op* (or the tensor's op) a state of a scan?"""
    return isinstance(getattr(op, "op", op), ScanOp)


# te.scan -----------------------------------------------------------------------------------------

def scan(init, update, state_placeholder, inputs=None, name="scan", tag="", attrs=None):
    """The scan of *update* from *init* along axis 0 (TVM's ``te.scan``).

    Parameters
    ----------
    init : Tensor or list of Tensor
        The first steps of each state: shape ``(k, *rest)`` with ``1 <= k <= T``.
    update : Tensor or list of Tensor
        A compute of each state's shape ``(T, *rest)`` whose body reads the states at earlier
        steps (``state[t - c, ...]`` with ``1 <= c <= k``), other tensors, arithmetic, selects
        and calls; a reduction may read other tensors but not a state.
    state_placeholder : Tensor or list of Tensor
        The states' stand-ins, from :func:`scan_state` (or ``te.placeholder``).
    inputs : list of Tensor, optional
        Accepted for TVM compatibility (the inputs are found from the update's reads).
    name : str
        The scan's name; with several states, state ``k`` is called ``name.v{k}``.
    tag, attrs
        As TVM's; *attrs* is kept on the operations, *tag* is not used.

    Returns
    -------
    Tensor, or a list of Tensor (one per state) when lists were given.
    """
    name = str(name)
    single = isinstance(init, Tensor)
    inits, updates, states = (_as_list(x, what, name) for x, what in
                              ((init, "init"), (update, "update"), (state_placeholder, "state")))
    if not len(inits) == len(updates) == len(states):
        raise TEError(f"scan {name!r}: give one init, one update and one state per state of "
                      f"the scan; got {len(inits)} init(s), {len(updates)} update(s) and "
                      f"{len(states)} state(s)")
    listed = isinstance(inputs, (list, tuple)) and all(isinstance(t, Tensor) for t in inputs)
    if inputs is not None and not isinstance(inputs, Tensor) and not listed:
        raise TEError(f"scan {name!r}: inputs must be a tensor or a list of tensors, got "
                      f"{inputs!r}")
    init_rows = _check_shapes(name, inits, updates, states)
    for u in updates:       # reads before the start of the states are steps back; others not
        raise_deferred(u.op, {id(s.op) for s in states})
    sources = [_update_source(name, u, states) for u in updates]
    first = updates[0].op.axis
    names = [name] if single else [f"{name}.v{k}" for k in range(len(states))]
    shapes = [tuple(s.shape) for s in states]
    outs = declare_scan(names, shapes, [s.dtype for s in states], 0, init_rows,
                        lambda k, axis, outs: _scan_body(name, k, axis, outs, inits[k],
                                                         updates[k], sources[k], states,
                                                         init_rows),
                        axis_names=[iv.name for iv in first], attrs=attrs)
    return outs[0] if single else outs


def _as_list(x, what, name):
    if isinstance(x, Tensor):
        return [x]
    try:
        xs = list(x)
    except TypeError:
        xs = None
    if not xs or not all(isinstance(t, Tensor) for t in xs):
        raise TEError(f"scan {name!r}: {what} must be a tensor or a non-empty list of tensors, "
                      f"got {x!r}")
    return xs


def _check_shapes(name, inits, updates, states):
    """The number of init rows, after checking every init, update and state agree."""
    rows = None
    for k, (i, u, s) in enumerate(zip(inits, updates, states)):
        where = f"scan {name!r}, state {k} ({s.name})"
        if not isinstance(s.op, PlaceholderOp):
            raise TEError(f"{where}: the state must be a placeholder (te.scan_state or "
                          f"te.placeholder) that the update reads, got the computed tensor "
                          f"{s.name}")
        if not isinstance(u.op, ComputeOp):
            raise TEError(f"{where}: the update {u.name} must be a te.compute, got a placeholder")
        if tuple(u.shape) != tuple(s.shape):
            raise TEError(f"{where}: the update {u.name} has shape {u.shape} but the state has "
                          f"shape {s.shape}; they must be equal (the scan's output shape)")
        if tuple(i.shape[1:]) != tuple(s.shape[1:]):
            raise TEError(f"{where}: the init {i.name} has shape {i.shape}; it must be "
                          f"(k, {', '.join(map(str, s.shape[1:]))}): the state's shape "
                          f"{s.shape} with k initial steps")
        k_rows = i.shape[0]
        if not isinstance(k_rows, int) or (isinstance(s.shape[0], int) and k_rows > s.shape[0]):
            raise TEError(f"{where}: the init {i.name} has {k_rows} rows along the scan axis; "
                          f"it must be a constant number of steps, at most the state's "
                          f"{s.shape[0]}")
        if rows is not None and k_rows != rows:
            raise TEError(f"{where}: the init {i.name} has {k_rows} rows but state 0's init has "
                          f"{rows}; every state of a scan starts with the same number of steps")
        rows = k_rows
        if not i.dtype == u.dtype == s.dtype:
            raise TEError(f"{where}: the init ({i.dtype}), the update ({u.dtype}) and the state "
                          f"({s.dtype}) must have one dtype (cast the update with .astype)")
        if tuple(states[0].shape) != tuple(s.shape):
            raise TEError(f"{where}: its shape {s.shape} differs from state 0's "
                          f"{states[0].shape}; the states of a scan share one loop nest")
    if len({id(s.op) for s in states}) != len(states):
        raise TEError(f"scan {name!r}: a state is given twice")
    return rows


def _update_source(name, update, states):
    """The update's body with every stage between it and the states inlined, so that the
    scan's body reads the states directly; a stage computing a reduction over a state cannot
    run one step at a time this way: a TEError."""
    state_ops = {id(s.op) for s in states}
    memo = {}

    def reached(op):
        """The states *op* reads, directly or through other stages."""
        got = memo.get(id(op))
        if got is None:
            got = {id(op)} & state_ops
            if isinstance(op, ComputeOp) and not isinstance(op, ScanOp):
                got = got.union(*(reached(t.op) for t in op.input_tensors))
            memo[id(op)] = got
        return got

    def refuse_reduction(op):
        state = next(s.name for s in states if id(s.op) in reached(op))
        raise TEError(f"scan {name!r}: the update {update.name} reduces over the state {state} "
                      f"(in {op.name}: {op.body}); a reduction over a state is not a step of a "
                      "scan. Reductions over other tensors are fine: declare them as their own "
                      "compute and read them in the update")

    if isinstance(update.op.body, E.Reduce):
        if reached(update.op):
            refuse_reduction(update.op)
        return update[tuple(iv.var for iv in update.op.axis)]    # a stage of its own

    def inline(x):
        if not isinstance(x, E.TensorRead) or id(x.tensor.op) in state_ops \
                or not reached(x.tensor.op):
            return None
        op = x.tensor.op
        if op.reduce_axis or isinstance(op.body, E.Reduce):
            refuse_reduction(op)
        body = substitute(op.body, {iv.var: ix for iv, ix in zip(op.axis, x.indices)})
        return transform(body, inline)

    return transform(update.op.body, inline)


def _scan_body(name, k, axis, outs, init, update, source, states, init_rows):
    """State *k*'s body over the scan's *axis* vars: its init's rows, then its update with each
    state read turned into a read of that state's output."""
    mapping = {iv.var: v for iv, v in zip(update.op.axis, axis)}
    by_state = {id(s.op): (j, s) for j, s in enumerate(states)}
    ranges = {v: (0, n - 1) for v, n in zip(axis, outs[k].shape)}      # n - 1 may be symbolic

    def redirect(x):
        if isinstance(x, E.TensorRead) and id(x.tensor.op) in by_state:
            j, state = by_state[id(x.tensor.op)]
            return _state_read(name, update, state, outs[j], x, axis[0], init_rows, ranges)
        return None

    step = transform(substitute(source, mapping), redirect)
    first = init[tuple(axis)]
    if isinstance(outs[k].shape[0], int) and init_rows >= outs[k].shape[0]:
        return first                                         # every step comes from the init
    return E.Select(axis[0] < init_rows, first, step, outs[k].dtype)


def _state_read(name, update, state, out, read, t, init_rows, ranges):
    """The read of *out* that replaces *read* of *state*: at step ``t - c`` with
    ``1 <= c <= init_rows`` (else a TEError), the other indices clamped unless provably in
    the state's shape (``te.compute`` does not guard reads of a scan state)."""
    ix = _unclamped(read.indices[0])
    back = simplify(t - ix)
    shown = f"{state.name}[{', '.join(str(_unclamped(x)) for x in read.indices)}]"
    if not isinstance(back, E.Const):
        raise TEError(f"scan {name!r}: the update {update.name} reads {shown}; a state is read "
                      f"at an earlier step given as {t.name} - c with a constant c >= 1 "
                      f"(e.g. {state.name}[{t.name} - 1, ...])")
    if back.value < 1:
        at = t.name if back.value == 0 else f"{t.name} + {-back.value}"
        raise TEError(f"scan {name!r}: the update {update.name} reads {shown}, the state at "
                      f"step {at}, which is not computed yet; a step reads only earlier steps "
                      f"({state.name}[{t.name} - 1, ...])")
    if back.value > init_rows:
        raise TEError(f"scan {name!r}: the update {update.name} reads {shown}, {back.value} "
                      f"steps back, but the init gives only {init_rows} row(s), so step "
                      f"{init_rows} would read before row 0; give an init of at least "
                      f"{back.value} rows")
    indices = [ix]
    for n, other in zip(out.shape[1:], read.indices[1:]):
        other = _unclamped(other)
        indices.append(other if provably_inside(other, ranges, n) else E.clamp_index(other, n))
    return E.TensorRead(out, tuple(indices), out.dtype)


def _unclamped(ix):
    """*ix* without the clamp ``te.compute`` puts around an index it cannot prove inside
    (``max(min(x, n - 1), 0)``): a state read at ``t - 1`` under a symbolic extent."""
    if isinstance(ix, E.Binary) and ix.op is E.BinOp.MAX and isinstance(ix.b, E.Const) \
            and ix.b.value == 0 and isinstance(ix.a, E.Binary) and ix.a.op is E.BinOp.MIN:
        return ix.a.a
    return ix


def declare_scan(names, shapes, dtypes_, scan_dim, init_rows, body_fn, axis_names, attrs=None):
    """One :class:`ScanOp` per state (*names*, *shapes*, *dtypes_*), scanning along axis
    *scan_dim*; ``body_fn(k, axis_vars, outputs)`` gives state *k*'s body over its own axis
    variables, reading the *outputs* (every state's tensor) at earlier steps."""
    ops = []
    for n, shape, dt in zip(names, shapes, dtypes_):
        axis = tuple(IterVar(E.Var(a), 0, ext, IterKind.DATA) for a, ext in zip(axis_names, shape))
        ops.append(ScanOp(n, axis, dt, scan_dim, init_rows, attrs))
    outs = [op.output() for op in ops]
    for k, op in enumerate(ops):
        op.body = E.as_expr(body_fn(k, [iv.var for iv in op.axis], outs))
        op.group = tuple(ops)
    return outs


# cumulative sums and products -------------------------------------------------------------------

def cumsum(data, axis=0, dtype=None, exclusive=False, name=None) -> Tensor:
    """The cumulative sum of *data* along *axis* (NumPy's ``np.cumsum``), in *data*'s layout.

    *dtype* defaults to NumPy's: a float keeps its type, an integer or bool sums in int64.
    ``exclusive=True`` sums the elements before each one (the first is 0).
    """
    return _cumulative(data, axis, dtype, exclusive, name or "cumsum", "cumsum",
                       lambda a, b: a + b, 0)


def cumprod(data, axis=0, dtype=None, exclusive=False, name=None) -> Tensor:
    """The cumulative product of *data* along *axis* (NumPy's ``np.cumprod``), in *data*'s
    layout; *dtype* and *exclusive* as in :func:`cumsum` (the first exclusive product is 1)."""
    return _cumulative(data, axis, dtype, exclusive, name or "cumprod", "cumprod",
                       lambda a, b: a * b, 1)


@dataclass(frozen=True)
class Cumulative:
    """What a scan made by :func:`cumsum` / :func:`cumprod` computes (``ScanOp.cumulative``),
    for te.gradient: *what* of *data* along its scan axis."""
    what: str
    data: Tensor
    exclusive: bool


def _cumulative(data, axis, dtype, exclusive, name, what, combine, identity):
    """A scan along *axis*: its loop nest keeps *data*'s axis order, the scan axis serial."""
    if not isinstance(data, Tensor):
        raise TEError(f"{what}: expected a tensor, got {data!r}")
    nd = len(data.shape)
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -nd <= axis < nd:
        raise TEError(f"{what} of {data.name}: axis must be an integer in {-nd}..{nd - 1} "
                      f"({data.name} has {nd} dimension(s)), got {axis!r}")
    axis = int(axis) % nd
    if dtype is None:
        dtype = data.dtype if dtypes.is_float(data.dtype) else "int64"
    dtype = dtypes.canonical(dtype, f"{what} of {data.name}")

    def body(k, v, outs):
        t = v[axis]

        def x_at(step):
            x = data[tuple(step if d == axis else v[d] for d in range(nd))]
            return x if x.dtype == dtype else x.astype(dtype)
        prev = outs[0][tuple(t - 1 if d == axis else v[d] for d in range(nd))]
        if exclusive:
            return E.Select(t < 1, E.const(identity, dtype), combine(prev, x_at(t - 1)), dtype)
        return E.Select(t < 1, x_at(t), combine(prev, x_at(t)), dtype)

    names = [f"ax{d}" if d != axis else "t" for d in range(nd)]
    out = declare_scan([str(name)], [tuple(data.shape)], [dtype], axis, 1, body, names)[0]
    out.op.cumulative = Cumulative(what, data, bool(exclusive))
    return out


def redeclare_scan(op, changed) -> Tensor:
    """Scan *op* declared again with its reads of the tensors whose ops *changed* maps
    (``id(op) -> tensor``) redirected there (:func:`einloop.te.partition.cut`); its reads of
    itself read the new scan.  A scan of several states is not (a TEError)."""
    if len(op.group) > 1:
        cut_off = ", ".join(t.name for t in changed.values())
        raise TEError(f"cutting {op.name} off from {cut_off}: {op.name} is one of the "
                      f"{len(op.group)} states of a scan, which is not declared again on new "
                      "inputs; compute it in the kernel of the stages it reads")

    def body(k, axis, outs):
        def redirect(x):
            if not isinstance(x, E.TensorRead):
                return None
            to = outs[0] if x.tensor.op is op else changed.get(id(x.tensor.op))
            return None if to is None else E.TensorRead(to, x.indices, x.dtype)
        return transform(substitute(op.body, {iv.var: v for iv, v in zip(op.axis, axis)}),
                         redirect)

    out = declare_scan([op.name], [op.shape], [op.dtype], op.scan_dim, op.init_rows, body,
                       [iv.name for iv in op.axis], op.attrs)[0]
    cum = getattr(op, "cumulative", None)
    if cum is not None:
        out.op.cumulative = Cumulative(cum.what, changed.get(id(cum.data.op), cum.data),
                                       cum.exclusive)
    return out


# adjoints ---------------------------------------------------------------------------------------

def scan_adjoint(op, head, needed) -> list:
    """``(producer tensor, contribution)`` for te.gradient: the adjoint *head* of scan *op* carried
    to the *needed* producers.  A cumulative sum's adjoint is the cumulative sum of *head*
    backwards along the same axis (itself a scan); other scans raise a TEError."""
    cum = getattr(op, "cumulative", None)
    if cum is None or cum.what != "cumsum" or cum.data.dtype != op.dtype:
        what = "a cumulative product" if cum is not None and cum.what == "cumprod" else \
            "this scan" if cum is None else "a cumulative sum that casts its input"
        raise TEError(f"te.gradient: {op.name} is a scan, whose adjoint is a scan backwards "
                      f"along its scan axis; te.gradient derives it for te.cumsum (same dtype), "
                      f"not for {what} (differentiate the stages after it, with its output as "
                      "an input)")
    if not needed:
        return []
    return [(cum.data, _reverse_cumsum(op, head, cum.exclusive))]


def _reverse_cumsum(op, head, exclusive):
    """``g[..., t, ...] = sum of head[..., s, ...] over s >= t`` (``s > t`` if *exclusive*): a
    cumulative sum over the scan axis reversed, read back in forward order."""
    d, n = op.scan_dim, op.shape[op.scan_dim]
    nd = len(op.shape)

    def at(v, step):
        return tuple(step if k == d else v[k] for k in range(nd))

    def body(k, v, outs):
        t = v[d]
        prev = outs[0][at(v, t - 1)]
        if exclusive:
            return E.Select(t < 1, E.const(0, op.dtype), prev + head[at(v, (n - 1) - (t - 1))],
                            op.dtype)
        return E.Select(t < 1, head[at(v, (n - 1) - t)], prev + head[at(v, (n - 1) - t)],
                        op.dtype)

    names = [f"ax{k}" if k != d else "t" for k in range(nd)]
    rev = declare_scan([f"{op.name}.grad.rev"], [op.shape], [op.dtype], d, 1, body, names)[0]
    axis = tuple(IterVar(E.Var(a), 0, ext, IterKind.DATA) for a, ext in zip(names, op.shape))
    v = [iv.var for iv in axis]
    flipped = rev[at(v, (n - 1) - v[d])]
    return ComputeOp(f"{op.cumulative.data.name}.grad.{op.name}", axis, flipped).output()
