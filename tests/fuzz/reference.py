"""An independent NumPy evaluator of case declarations, with a rounding-error bound per element.

It interprets the case's expression trees directly (never einloop's lowering), following the
semantics the README documents: reads not provably in bounds are clamped (so every read here is
clipped; a read einloop proves in bounds is unchanged by the clip), ``if_then_else`` is lazy
(both sides are computed on clipped reads and one is chosen), integer arithmetic wraps, integer
``//`` and ``%`` floor with ``x // 0 == x % 0 == 0`` as in NumPy, float-to-int casts truncate.

Integers are evaluated exactly in their own dtype.  Floats are evaluated in float64 with ``err``,
a bound on how far any correct evaluation in the declared dtype may be from that value (each
operation adds its rounding, intrinsics their approximation error, and errors of operands are
propagated through derivatives or, for monotone functions, by evaluating at both ends of the
interval).  Where an error could flip a discontinuous result (floor, a float comparison, a
float-to-int cast) the element is marked uncertain and is not compared.
"""
from __future__ import annotations

import numpy as np

UNIT = {"float16": 2.0 ** -11, "float32": 2.0 ** -24, "float64": 2.0 ** -53}
#: the absolute error of rounding into the subnormal range (gradual underflow)
SUBNORMAL = {d: float(np.finfo(d).smallest_subnormal) for d in UNIT}
#: ulps an intrinsic may be off by (einloop's float32 intrinsics are polynomial approximations)
INTRINSIC_ULPS = 16
def _erf(x):
    """erf in float64 (NumPy has none)."""
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(x)


#: monotone intrinsics: the error of f(a) is bounded by f at the ends of a's interval
_MONOTONE = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
             "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": _erf}


class V:
    """A value over the evaluation grid: ``val`` (float64 for floats), ``err``, ``unc`` mask."""

    __slots__ = ("val", "dtype", "err", "unc")

    def __init__(self, val, dtype, err=None, unc=False):
        self.val, self.dtype, self.err, self.unc = val, dtype, err, unc

    @property
    def is_float(self):
        return self.dtype in UNIT


def rounding_error(r, dtype, ulps=1.0):
    """How far rounding *r* to *dtype* may move it, ``ulps`` times over."""
    return ulps * (UNIT[dtype] * np.abs(r) + SUBNORMAL[dtype])


def _overflow(r, dtype):
    """Values that round beyond the dtype's range become inf, as they do when stored in that dtype:
    IEEE rounding sends to inf only from half an ulp above the largest finite value (float16:
    65520, not 65504)."""
    top = np.finfo(dtype).max
    big = float(top) + (float(top) - float(np.nextafter(top, np.zeros((), dtype)))) / 2
    return np.where(np.abs(r) >= big, np.sign(r) * np.inf, r)


class Evaluator:
    """Evaluates the tensors of one case on given input arrays."""

    def __init__(self, case, inputs):
        self.case = case
        self.tensors = {}
        self.vars = {}
        for t in case["tensors"]:
            if t["kind"] == "placeholder":
                a = np.asarray(inputs[t["name"]])
                val = a.astype(np.float64) if t["dtype"] in UNIT else a
                self.tensors[t["name"]] = V(val, t["dtype"], np.zeros(a.shape) if
                                            t["dtype"] in UNIT else None, np.zeros(a.shape, bool))

    def run(self):
        from . import reference_lang
        with np.errstate(all="ignore"):
            for t in self.case["tensors"]:
                if t["kind"] == "compute":
                    self.tensors[t["name"]] = self.compute(t)
                elif t["kind"] == "einsum":
                    self.tensors[t["name"]] = self.einsum(t)
                elif t["kind"] != "placeholder":
                    outs = reference_lang.evaluate_construct(self, t)
                    self.tensors.update(zip([p["name"] for p in t.get("parts", [t])], outs))
        return self.tensors

    # stages -----------------------------------------------------------------------------------
    def grid(self, t):
        """Bind the loop variables of compute-like *t* (data axes, then reduction axes) over
        their grid; return the grid's shape."""
        axes = [(n, 0, e) for n, e in zip(t["vars"], t["shape"])]
        axes += [(k["name"], k["start"], k["extent"]) for k in t.get("reduce", ())]
        self.vars = {}
        for d, (name, start, ext) in enumerate(axes):
            shape = [1] * len(axes)
            shape[d] = ext
            self.vars[name] = np.arange(start, start + ext, dtype=np.int64).reshape(shape)
        return tuple(e for _, _, e in axes)

    def compute(self, t):
        grid = self.grid(t)
        v = self.ev(t["body"])
        v = _broadcast(_resolve(v, t["dtype"]), grid)
        if "reduce" in t:
            where = V(np.ones(grid, bool), "bool", None, np.zeros(grid, bool)) \
                if t.get("where") is None else _broadcast(self.ev(t["where"]), grid)
            v = _reduce(t["reducer"], v, where, len(t["vars"]))
        if v.is_float:
            v.val = _overflow(v.val, v.dtype)
        return v

    def einsum(self, t):
        ops = [self.tensors[n] for n in t["operands"]]
        subs, dt = t["subscripts"], t["dtype"]
        shape = tuple(t["shape"])
        unc = np.zeros(shape, bool)
        for i in range(len(ops)):
            ind = [o.unc.astype(np.int64) if j == i else np.ones(o.val.shape, np.int64)
                   for j, o in enumerate(ops)]
            unc |= np.einsum(subs, *ind).reshape(shape) > 0
        if dt not in UNIT:
            val = np.einsum(subs, *[o.val.astype(np.int64) for o in ops]).astype(dt)
            return V(val.reshape(shape), dt, None, unc)
        val = np.einsum(subs, *[o.val for o in ops]).reshape(shape)
        mags = np.einsum(subs, *[np.abs(o.val) for o in ops]).reshape(shape)
        upper = np.einsum(subs, *[np.abs(o.val) + o.err for o in ops]).reshape(shape)
        terms = int(np.prod([o.val.size for o in ops])) // max(1, int(np.prod(shape)))
        err = (upper - mags) + rounding_error(upper, dt, terms + len(ops))
        return V(_overflow(val, dt), dt, err, unc)

    # expressions ------------------------------------------------------------------------------
    def ev(self, e) -> V:
        kind = e[0]
        if kind == "var":
            return V(self.vars[e[1]], "int64", None, False)
        if kind == "lit":
            return V(e[1], None)                   # dtype taken from the other operand
        if kind == "const":
            return _const(e[1], e[2])
        if kind == "nan":
            return _const(np.nan, e[1])
        if kind == "read":
            return self.read(e)
        if kind in ("bin", "cmp", "mm"):
            a, b = _unify(self.ev(e[2]), self.ev(e[3]))
            return {"bin": _binary, "cmp": _compare, "mm": _minmax}[kind](e[1], a, b)
        if kind == "neg":
            a = self.ev(e[1])
            return _binary("-", _const(0, a.dtype), a)
        if kind in ("and", "or"):
            return _logical(kind, [self.ev(e[1]), self.ev(e[2])])
        if kind in ("all", "any"):
            return _logical("and" if kind == "all" else "or", [self.ev(c) for c in e[1]])
        if kind == "not":
            a = self.ev(e[1])
            return V(~a.val, "bool", None, a.unc)
        if kind == "select":
            return _select(self.ev(e[1]), *_unify(self.ev(e[2]), self.ev(e[3])))
        if kind == "cast":
            return _cast(_resolve(self.ev(e[2]), None), e[1])
        if kind == "call":
            args = [self.ev(x) for x in e[2:]]
            if len(args) == 2:
                args = list(_unify(*args))
            return _call(e[1], *args)
        raise ValueError(f"unknown expression node {e!r}")

    def read(self, e):
        src = self.tensors[e[1]]
        idx, unc = [], False
        for ix, ext in zip(e[2], src.val.shape):
            v = _resolve(self.ev(ix), "int64")
            idx.append(np.clip(v.val.astype(np.int64), 0, ext - 1))
            unc = unc | v.unc
        idx = np.broadcast_arrays(*idx)
        err = None if src.err is None else src.err[tuple(idx)]
        return V(src.val[tuple(idx)], src.dtype, err, src.unc[tuple(idx)] | unc)


# helpers ----------------------------------------------------------------------------------------

def _const(value, dtype):
    if dtype in UNIT:
        return V(np.float64(np.array(value, dtype)), dtype, 0.0, False)
    return V(np.array(value).astype(dtype), dtype, None, False)


def _resolve(v, dtype):
    """A literal takes *dtype*; typed values pass through."""
    if v.dtype is not None:
        return v
    if dtype is None:
        dtype = "int64" if isinstance(v.val, int) else "float32"
    return _const(v.val, dtype)


def _unify(a, b):
    return _resolve(a, b.dtype), _resolve(b, a.dtype)


def _broadcast(v, grid):
    val = np.broadcast_to(v.val, grid)
    err = None if v.err is None else np.broadcast_to(v.err, grid)
    return V(val, v.dtype, err, np.broadcast_to(v.unc, grid))


def _binary(op, a, b):
    dt = a.dtype
    if not a.is_float:
        f = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
             "%": np.remainder}[op]
        return V(f(np.asarray(a.val, dt), np.asarray(b.val, dt)).astype(dt), dt, None,
                 a.unc | b.unc)
    x, y, ex, ey = a.val, b.val, a.err, b.err
    if op == "+":
        r, err = x + y, ex + ey
    elif op == "-":
        r, err = x - y, ex + ey
    elif op == "*":
        r, err = x * y, np.abs(x) * ey + np.abs(y) * ex + ex * ey
    else:
        r = x / y
        room = np.abs(y) - ey
        err = np.where(room > 0, (ex + np.abs(r) * ey) / np.where(room > 0, room, 1), np.inf)
    return V(r, dt, err + rounding_error(r, dt), a.unc | b.unc)


def _compare(op, a, b):
    f = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
         "==": np.equal, "!=": np.not_equal}[op]
    r = f(a.val, b.val)
    unc = a.unc | b.unc
    if a.is_float:
        slack = a.err + b.err
        unc = unc | ((np.abs(a.val - b.val) <= slack) & (slack > 0)) | ~np.isfinite(slack)
    return V(r, "bool", None, unc)


def _minmax(fn, a, b):
    f = np.maximum if fn in ("max", "maximum") else np.minimum
    r = f(a.val, b.val)
    err = None if a.err is None else np.maximum(a.err, b.err)
    return V(r if a.is_float else np.asarray(r, a.dtype), a.dtype, err, a.unc | b.unc)


def _logical(op, parts):
    val, unc = parts[0].val, parts[0].unc
    for p in parts[1:]:
        val = (val & p.val) if op == "and" else (val | p.val)
        unc = unc | p.unc
    return V(val, "bool", None, unc)


def _select(c, t, f):
    val = np.where(c.val, t.val, f.val)
    if not t.is_float:
        val = val.astype(t.dtype)
    err = None if t.err is None else np.where(c.val, t.err, f.err)
    return V(val, t.dtype, err, c.unc | np.where(c.val, t.unc, f.unc))


def _cast(a, dtype):
    if dtype == a.dtype:
        return a
    if dtype in UNIT:
        if a.is_float:
            r, err = a.val, a.err
        else:
            r, err = np.asarray(a.val).astype(np.float64), 0.0
        r = _overflow(r, dtype)
        return V(r, dtype, err + rounding_error(r, dtype), a.unc)
    if not a.is_float:
        return V(np.asarray(a.val).astype(dtype), dtype, None, a.unc)
    if dtype == "bool":
        return V(a.val != 0, "bool", None, a.unc | ((np.abs(a.val) <= a.err) & (a.err > 0)))
    lo, hi = np.trunc(a.val - a.err), np.trunc(a.val + a.err)
    info = np.iinfo(dtype)
    ok = (lo > info.min - 1) & (hi < info.max + 1) & np.isfinite(a.val)   # else C leaves it undefined
    r = np.where(ok, np.trunc(a.val), 0).astype(dtype)
    return V(r, dtype, None, a.unc | (lo != hi) | ~ok)


def _call(fn, a, b=None):
    dt = a.dtype
    if fn == "abs":
        r = np.abs(a.val)
        return V(r if a.is_float else np.asarray(r, dt), dt, a.err, a.unc)
    if fn in ("floor", "ceil"):
        f = np.floor if fn == "floor" else np.ceil
        r = f(a.val)
        return V(r, dt, np.zeros_like(r), a.unc | (f(a.val - a.err) != f(a.val + a.err)))
    if fn in ("pow", "power"):
        r = np.power(a.val, b.val)
        corners = [np.power(x, y) for x in (a.val - a.err, a.val + a.err)
                   for y in (b.val - b.err, b.val + b.err)]
        err = np.max([np.abs(c - r) for c in corners], axis=0)
        err = np.where(a.val - a.err > 0, err, np.inf)
        return V(r, dt, err + rounding_error(np.abs(r) + 1, dt, INTRINSIC_ULPS), a.unc | b.unc)
    f = _MONOTONE[fn]
    r = f(a.val)
    lo, hi = f(a.val - a.err), f(a.val + a.err)
    err = np.maximum(np.abs(lo - r), np.abs(hi - r))
    err = np.where(np.isnan(err) & ~np.isnan(r), np.inf, err)
    return V(r, dt, err + rounding_error(np.abs(r) + 1, dt, INTRINSIC_ULPS), a.unc)


_IDENTITY = {"sum": 0, "csum": 0, "prod": 1, "absmax": 0}


def _reduce(reducer, v, where, ndata):
    """Reduce the trailing axes of *v* (the reduction axes) over the points where *where* holds."""
    axes = tuple(range(ndata, v.val.ndim))
    w = where.val
    unc = np.any((v.unc & w) | where.unc, axis=axes)
    n = int(np.prod([v.val.shape[a] for a in axes]))
    dt = v.dtype
    if reducer in ("max", "min", "cmin", "absmax"):
        val = np.abs(v.val) if reducer == "absmax" else v.val
        if not v.is_float:
            val = np.asarray(val, dt)
        big = np.inf if v.is_float else np.iinfo(dt).max
        if reducer == "max":
            ident = -np.inf if v.is_float else np.iinfo(dt).min
        else:
            ident = 0 if reducer == "absmax" else big
        f = np.max if reducer in ("max", "absmax") else np.min
        r = f(np.where(w, val, ident), axis=axes, initial=ident)
        if reducer == "absmax":
            r = np.maximum(r, 0)
        err = None if not v.is_float else np.max(np.where(w, v.err, 0), axis=axes, initial=0)
        return V(r if v.is_float else r.astype(dt), dt, err, unc)
    ident = _IDENTITY[reducer]
    if not v.is_float:
        x = np.where(w, np.asarray(v.val).astype(np.int64), ident)
        r = (np.sum(x, axis=axes) if reducer != "prod" else np.prod(x, axis=axes)).astype(dt)
        return V(r, dt, None, unc)
    x = np.where(w, v.val, ident)
    mag = np.where(w, np.abs(v.val) + v.err, ident)
    if reducer == "prod":
        r = np.prod(x, axis=axes)
        upper = np.prod(mag, axis=axes)
        err = upper - np.abs(r) + rounding_error(upper, dt, n + 1)
    else:
        r = np.sum(x, axis=axes)
        err = np.sum(np.where(w, v.err, 0), axis=axes) + rounding_error(np.sum(mag, axis=axes), dt, n + 1)
    return V(r, dt, err, unc)


def evaluate(case, inputs):
    """Reference values of every tensor of *case*: name -> V (val, err, unc)."""
    return Evaluator(case, inputs).run()
