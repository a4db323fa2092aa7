"""NumPy meaning of the newer constructs (:mod:`.gen_lang`), independent of einloop's lowering.

Each function takes the :class:`.reference.Evaluator` (whose ``tensors`` hold the values read)
and a description, and returns one :class:`.reference.V` per output part.  The semantics are the
documented ones: ``np.argmax``/``np.max`` (first index on ties, the first NaN wins), the
running sum/product of ``np.cumsum``/``np.cumprod`` in the output dtype (integers wrap), and
``np.add.at`` with every index clamped into its output dimension (``te.scatter_add``,
``te.histogram``).  Float results carry an error bound as in :mod:`.reference`; an integer or
index result that a float's error could change is marked uncertain.
"""
from __future__ import annotations

import numpy as np

from .reference import INTRINSIC_ULPS, UNIT, V, _broadcast, _overflow, _resolve, rounding_error


def evaluate_construct(ev, t):
    """The values of the output parts of construct *t* (a list of V)."""
    return _KINDS[t["kind"]](ev, t)


# tuple reductions -------------------------------------------------------------------------------

def _argreduce(ev, t):
    src = ev.tensors[t["src"]]
    axis, shape = t["axis"], tuple(t["shape"])
    x = np.moveaxis(np.asarray(src.val), axis, -1)
    unc = np.any(np.moveaxis(np.broadcast_to(src.unc, src.val.shape), axis, -1), axis=-1)
    pick, best = (np.argmax, np.max) if t["fn"] == "argmax" else (np.argmin, np.min)
    idx = pick(x, axis=-1)
    m = best(x, axis=-1)
    if not src.is_float:
        return [V(idx.astype(t["index_dtype"]).reshape(shape), t["index_dtype"], None,
                  unc.reshape(shape)),
                V(np.asarray(m, src.dtype).reshape(shape), src.dtype, None, unc.reshape(shape))]
    err = np.moveaxis(np.broadcast_to(src.err, src.val.shape), axis, -1)
    err_m = np.take_along_axis(err, idx[..., None], -1)
    # another element within the error bounds of the best may be the best in the declared dtype
    slack = err + err_m
    near = (np.abs(x - m[..., None]) <= slack) & (slack > 0)
    near &= np.arange(x.shape[-1]) != idx[..., None]
    idx_unc = unc | near.any(-1)
    return [V(idx.astype(t["index_dtype"]).reshape(shape), t["index_dtype"], None,
              idx_unc.reshape(shape)),
            V(m.reshape(shape), src.dtype, err.max(-1).reshape(shape), unc.reshape(shape))]


def _reduced_values(ev, t):
    """The body of compute-like *t* over its grid: (value, its unc reduced over the axis)."""
    grid = ev.grid(t)
    v = _broadcast(_resolve(ev.ev(t["body"]), t["dtype"]), grid)
    return v, np.any(v.unc, axis=-1)


def _tuple_reduce(ev, t):
    v, unc = _reduced_values(ev, t)
    dt, n = t["dtype"], v.val.shape[-1]
    if t["reducer"] == "maxcount":
        x = np.asarray(v.val, dt)
        m = x.max(axis=-1)
        count = (x == m[..., None]).sum(axis=-1)
        return [V(m.astype(dt), dt, None, unc), V(count.astype("int32"), "int32", None, unc)]
    x, err = v.val, v.err
    mean = x.mean(axis=-1)
    m2 = ((x - mean[..., None]) ** 2).sum(axis=-1)
    big = np.max(np.abs(x) + err, axis=-1)
    ulps = 2 * n + 4                       # Welford's updates: O(n) roundings of size ~u * big
    err_mean = err.max(axis=-1) + rounding_error(big, dt, ulps)
    err_m2 = 4 * big * err.sum(axis=-1) + rounding_error(4 * big * big * n, dt, ulps)
    count = np.full(mean.shape, float(n))
    return [V(count, dt, np.zeros(mean.shape), unc), V(mean, dt, err_mean, unc),
            V(_overflow(m2, dt), dt, err_m2, unc)]


def _welford(ev, t):
    """``np.mean`` and ``np.var`` along the axis; the error of Welford's merges as for the
    hand-written welford reducer (:func:`_tuple_reduce`), the variance one division more."""
    src, axis, dt = _full(ev.tensors[t["src"]]), t["axis"], t["dtype"]
    shape = tuple(t["shape"])
    x = np.moveaxis(src.val, axis, -1)
    err = np.moveaxis(src.err, axis, -1)
    unc = np.any(np.moveaxis(src.unc, axis, -1), axis=-1).reshape(shape)
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    big = np.max(np.abs(x) + err, axis=-1)
    ulps = 2 * n + 4
    err_mean = err.max(axis=-1) + rounding_error(big, dt, ulps)
    err_var = (4 * big * err.sum(axis=-1) + rounding_error(4 * big * big * n, dt, ulps)) / n \
        + rounding_error(var, dt)
    return [V(mean.reshape(shape), dt, err_mean.reshape(shape), unc),
            V(var.reshape(shape), dt, err_var.reshape(shape), unc)]


def _multi(ev, t):
    out = []
    for body, part in zip(t["bodies"], t["parts"]):
        out.append(ev.compute({"vars": t["vars"], "shape": t["shape"], "body": body,
                               "dtype": part["dtype"]}))
    return out


# scans --------------------------------------------------------------------------------------------

def _scan(ev, t):
    src, dt, axis = ev.tensors[t["src"]], t["dtype"], t["axis"]
    shape = src.val.shape
    unc = np.logical_or.accumulate(np.broadcast_to(src.unc, shape), axis=axis)
    ident = 0 if t["fn"] == "cumsum" else 1
    if dt not in UNIT:
        x = np.asarray(src.val).astype(dt).astype(np.int64)
        f = np.cumsum if t["fn"] == "cumsum" else np.cumprod
        r = f(x, axis=axis)
        if t["exclusive"]:
            r, unc = _shift(r, ident, axis), _shift(unc, False, axis)
        return [V(r.astype(dt), dt, None, unc)]
    x, err = src.val, np.broadcast_to(src.err, shape)
    steps = np.arange(1, shape[axis] + 1).reshape([-1 if d == axis else 1
                                                   for d in range(len(shape))])
    if t["fn"] == "cumsum":
        r = np.cumsum(x, axis=axis)
        e = np.cumsum(err, axis=axis) + rounding_error(np.cumsum(np.abs(x) + err, axis=axis),
                                                       dt, steps + 1)
    else:
        r = np.cumprod(x, axis=axis)
        upper = np.cumprod(np.abs(x) + err, axis=axis)
        e = upper - np.abs(r) + rounding_error(upper, dt, steps + 1)
    if t["exclusive"]:
        r, e, unc = _shift(r, ident, axis), _shift(e, 0, axis), _shift(unc, False, axis)
    return [V(_overflow(r, dt), dt, e, unc)]


def _user_scan(ev, t):
    """The states of a user-written ``te.scan``, by a plain loop over the steps (see
    gen_lang._lang_user_scan): rows below ``lag`` from the inits, then each update.  Each
    step's error: the coefficients times the errors read, plus the roundings of its products
    and sums (relative to the sum of the terms' magnitudes), of casts, and of tanh."""
    x = _full(ev.tensors[t["src"]])
    states, lag = t["states"], t["lag"]
    n = x.val.shape[0]
    val = [np.zeros(x.val.shape) for _ in states]
    err = [np.zeros(x.val.shape) for _ in states]
    unc = [np.zeros(x.val.shape, bool) for _ in states]
    for r in range(min(lag, n)):
        for k, st in enumerate(states):
            val[k][r] = st["init"] * x.val[r]
            err[k][r] = abs(st["init"]) * x.err[r] + rounding_error(val[k][r], st["dtype"])
            unc[k][r] = x.unc[r]
    for step in range(lag, n):
        new = [_scan_step(t, st, x, val, err, unc, step) for st in states]
        for k, (v, e, u) in enumerate(new):
            val[k][step], err[k][step], unc[k][step] = v, e, u
    return [V(_overflow(v, st["dtype"]), st["dtype"], e, u)
            for v, e, u, st in zip(val, err, unc, states)]


def _scan_step(t, st, x, val, err, unc, step):
    """(value, error, unc) of state *st* at *step*, from the values of the earlier steps."""
    dt = st["dtype"]
    acc = st["gain"] * x.val[step]
    mag = np.abs(acc)
    e = abs(st["gain"]) * x.err[step] + rounding_error(acc, dt)      # the cast of x
    u = x.unc[step].copy() if st["gain"] else np.zeros(x.val.shape[1:], bool)
    for j, lag, c in st["coefs"]:
        v, ev_, uv = (_neighbour(a[step - lag], t["shift"]) for a in (val[j], err[j], unc[j]))
        acc = acc + c * v
        mag = mag + abs(c) * np.abs(v)
        e = e + abs(c) * ev_
        if t["states"][j]["dtype"] != dt:
            e = e + abs(c) * rounding_error(v, dt)                        # the cast of the read
        u = u | uv
    e = e + rounding_error(mag, dt, 2 * len(st["coefs"]) + 2)
    if t["act"]:
        acc = np.tanh(acc)                        # |tanh'| <= 1: the error passes through
        e = e + rounding_error(acc, dt, INTRINSIC_ULPS)
    return acc, e, u


def _neighbour(a, shift):
    """A step's values *a* (its spatial axes) read at the neighbour *shift* = [dim, by] of each
    point (dim counts the scan axis as 0), the index clamped into the axis as einloop does."""
    if not shift:
        return a
    d, by = shift
    idx = np.clip(np.arange(a.shape[d - 1]) + by, 0, a.shape[d - 1] - 1)
    return np.take(a, idx, axis=d - 1)


def _shift(a, first, axis):
    """*a* moved one step along *axis*, *first* at step 0 (an exclusive scan)."""
    out = np.roll(a, 1, axis=axis)
    sl = [slice(None)] * a.ndim
    sl[axis] = 0
    out[tuple(sl)] = first
    return out


# scatters -----------------------------------------------------------------------------------------

def _accumulate(shape, dt, targets, values):
    """``np.add.at`` of *values* (V, first axis the updates) at *targets* into zeros of *shape*
    (first axis the scattered one): the V of the sums."""
    if dt not in UNIT:
        out = np.zeros(shape, np.int64)
        np.add.at(out, targets, np.asarray(values.val).astype(np.int64))
        unc = np.zeros(shape, bool)
        np.logical_or.at(unc, targets, values.unc)
        return V(out.astype(dt), dt, None, unc)
    out, err, mag = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    np.add.at(out, targets, values.val)
    np.add.at(err, targets, values.err)
    np.add.at(mag, targets, np.abs(values.val) + values.err)
    unc = np.zeros(shape, bool)
    np.logical_or.at(unc, targets, values.unc)
    n = max(1, len(targets))
    return V(_overflow(out, dt), dt, err + rounding_error(mag, dt, n + 1), unc)


def _full(v):
    shape = np.shape(v.val)
    err = None if v.err is None else np.broadcast_to(v.err, shape)
    return V(np.asarray(v.val), v.dtype, err, np.broadcast_to(v.unc, shape))


def _scatter_add(ev, t):
    idx, upd = ev.tensors[t["index"]], _full(ev.tensors[t["updates"]])
    axis, shape = t["axis"], tuple(t["shape"])
    targets = np.clip(np.asarray(idx.val).astype(np.int64), 0, shape[axis] - 1)
    moved = V(np.moveaxis(upd.val, axis, 0), upd.dtype,
              None if upd.err is None else np.moveaxis(upd.err, axis, 0),
              np.moveaxis(upd.unc, axis, 0))
    out_shape = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    r = _accumulate(out_shape, t["dtype"], targets, moved)
    unc = np.moveaxis(r.unc, 0, axis) | np.any(idx.unc)
    return [V(np.moveaxis(r.val, 0, axis), r.dtype,
              None if r.err is None else np.moveaxis(r.err, 0, axis), unc)]


def _histogram(ev, t):
    data = _full(ev.tensors[t["data"]])
    targets = np.clip(data.val.astype(np.int64).ravel(), 0, t["bins"] - 1)
    if t["weights"] is None:
        w = V(np.ones(targets.shape, np.int64), "int32", None, np.zeros(targets.shape, bool))
    else:
        wt = _full(ev.tensors[t["weights"]])
        w = V(wt.val.ravel(), wt.dtype, None if wt.err is None else wt.err.ravel(),
              wt.unc.ravel())
    r = _accumulate((t["bins"],), t["dtype"], targets, w)
    r.unc = r.unc | np.any(data.unc)
    return [r]


def _extern(ev, t):
    """The C function of :mod:`.extern_fuzz`: 2 x + 1 (2 x is exact; one rounding)."""
    x = _full(ev.tensors[t["src"]])
    r = 2 * x.val + 1
    return [V(r, t["dtype"], 2 * x.err + rounding_error(r, t["dtype"]), x.unc)]


def _embedding(ev, t):
    ids, grad = ev.tensors[t["index"]], _full(ev.tensors[t["updates"]])
    rows, width = t["shape"]
    targets = np.clip(np.asarray(ids.val).astype(np.int64).ravel(), 0, rows - 1)
    vals = V(grad.val.reshape(-1, width), grad.dtype,
             None if grad.err is None else grad.err.reshape(-1, width), grad.unc.reshape(-1, width))
    r = _accumulate((rows, width), t["dtype"], targets, vals)
    r.unc = r.unc | np.any(ids.unc)
    return [r]


def _scatter_minmax(ev, t):
    """``np.maximum.at`` / ``np.minimum.at`` from *init* (the identity: -inf/+inf, or the
    integer extremes); out-of-range indices clamped, or skipped under ``where``."""
    ids, vals = ev.tensors[t["index"]], _full(ev.tensors[t["updates"]])
    dt, bins, top = t["dtype"], t["shape"][0], t["fn"] == "max"
    idx = np.asarray(ids.val).astype(np.int64)
    keep = (idx >= 0) & (idx < bins) if t["where"] else np.ones(idx.shape, bool)
    targets = np.clip(idx, 0, bins - 1)[keep]
    f = np.maximum if top else np.minimum
    if t["init"] is not None:
        init = t["init"]
    elif dt in UNIT:
        init = -np.inf if top else np.inf
    else:
        init = np.iinfo(dt).min if top else np.iinfo(dt).max
    out = np.full((bins,), init, np.float64 if dt in UNIT else np.int64)
    f.at(out, targets, np.asarray(vals.val)[keep].astype(out.dtype))
    unc = np.zeros((bins,), bool)
    np.logical_or.at(unc, targets, vals.unc[keep])
    unc |= np.any(ids.unc)
    if dt not in UNIT:
        return [V(out.astype(dt), dt, None, unc)]
    err = np.zeros((bins,))
    np.maximum.at(err, targets, vals.err[keep])
    return [V(out, dt, err, unc)]


_KINDS = {"welford": _welford, "user_scan": _user_scan, "embedding": _embedding,
          "scatter_minmax": _scatter_minmax, "extern": _extern, "argreduce": _argreduce,
          "tuple_reduce": _tuple_reduce, "multi": _multi, "scan": _scan,
          "scatter_add": _scatter_add, "histogram": _histogram}
