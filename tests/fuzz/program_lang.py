"""einloop source of the newer constructs (:mod:`.gen_lang`): one or two statements each.

The Python names of a multi-output construct are its parts' names (``M3, M3v = te.argmax(...,
name='M3')``); einloop names those tensors ``M3.v0``, ``M3.v1``.
"""
from __future__ import annotations

from .program import expr_source

#: source of the user-declared tuple reducers (te.comm_reducer on tuples)
TUPLE_REDUCERS = {
    "maxcount": "maxcount = te.comm_reducer(lambda x, y: (te.maximum(x[0], y[0]), "
                "te.if_then_else(x[0] > y[0], x[1], te.if_then_else(y[0] > x[0], y[1], "
                "x[1] + y[1]))), lambda t0, t1: (te.min_value(t0), te.const(0, t1)), "
                "name='maxcount')",
    "welford": "welford = te.comm_reducer(lambda a, b: (a[0] + b[0], a[1] + (b[1] - a[1]) * "
               "(b[0] / te.maximum(a[0] + b[0], 1.0)), a[2] + b[2] + (b[1] - a[1]) * (b[1] - "
               "a[1]) * a[0] * (b[0] / te.maximum(a[0] + b[0], 1.0))), "
               "lambda t0, t1, t2: (0.0, 0.0, 0.0), name='welford')",
}


def _shape(t):
    return f"({', '.join(map(str, t['shape']))},)"


def _lhs(t):
    return ", ".join(p["name"] for p in t["parts"])


def construct_lines(t):
    """Source lines declaring construct *t*."""
    return _LINES[t["kind"]](t)


def _argreduce(t):
    return [f"{_lhs(t)} = te.{t['fn']}({t['src']}, axis={t['axis']}, "
            f"dtype={t['index_dtype']!r}, name={t['name']!r})"]


def _tuple_reduce(t):
    k = t["reduce"][0]
    params = ", ".join(t["vars"])
    lines = [f"{k['name']} = te.reduce_axis(({k['start']}, {k['start'] + k['extent']}), "
             f"name={k['name']!r})"]
    body = expr_source(t["body"])
    if t["reducer"] == "maxcount":
        src = f"({body}, te.const(1, 'int32'))"
    else:
        dt = t["dtype"]
        src = f"(te.const(1.0, {dt!r}), {body}, te.const(0.0, {dt!r}))"
    lines.append(f"{_lhs(t)} = te.compute({_shape(t)}, lambda {params}: "
                 f"{t['reducer']}({src}, axis={k['name']}), name={t['name']!r})")
    return lines


def _welford(t):
    return [f"{_lhs(t)} = te.welford({t['src']}, axis={t['axis']}, name={t['name']!r})"]


def _tuple(xs):
    return f"({', '.join(map(str, xs))},)"


def _user_scan(t):
    """The states' placeholders (``<S>_s<k>``), inits (``<S>_i<k>``: ``b * x[r]`` for the
    first ``lag`` rows), updates (``<S>_u<k>``) and the ``te.scan`` of them."""
    name, src, shape = t["name"], t["src"], t["shape"]
    rest = [f"i{d}" for d in range(1, len(shape))]
    lines = [f"{name}_s{k} = te.scan_state({_shape(t)}, {st['dtype']!r}, name='{name}_s{k}')"
             for k, st in enumerate(t["states"])]
    for k, st in enumerate(t["states"]):
        ix = ", ".join(["r"] + rest)
        lines.append(f"{name}_i{k} = te.compute({_tuple([t['lag']] + shape[1:])}, lambda {ix}: "
                     f"({src}[{ix}] * {st['init']!r}).astype({st['dtype']!r}), "
                     f"name='{name}_i{k}')")
    for k, st in enumerate(t["states"]):
        lines.append(f"{name}_u{k} = te.compute({_shape(t)}, lambda {', '.join(['t'] + rest)}: "
                     f"{_scan_update(t, st, rest)}, name='{name}_u{k}')")
    if len(t["states"]) == 1:
        lines.append(f"{name} = te.scan({name}_i0, {name}_u0, {name}_s0, name={name!r})")
        return lines
    lists = [f"[{', '.join(f'{name}_{w}{k}' for k in range(len(t['states'])))}]"
             for w in "ius"]
    lines.append(f"{_lhs(t)} = te.scan({', '.join(lists)}, name={name!r})")
    return lines


def _scan_update(t, st, rest):
    """One state's update: ``g * x[t] + c * state_j[t - l] + ...`` (tanh of it if ``act``)."""
    dt, terms = st["dtype"], []
    if st["gain"]:
        terms.append(f"{st['gain']!r} * {t['src']}[{', '.join(['t'] + rest)}].astype({dt!r})")
    shifted = list(rest)
    if t["shift"]:
        d, by = t["shift"]
        shifted[d - 1] = f"{rest[d - 1]} {'+' if by > 0 else '-'} {abs(by)}"
    for j, lag, c in st["coefs"]:
        read = f"{t['name']}_s{j}[{', '.join([f't - {lag}'] + shifted)}]"
        if t["states"][j]["dtype"] != dt:
            read += f".astype({dt!r})"
        terms.append(f"{c!r} * {read}")
    body = " + ".join(terms)
    return f"te.tanh({body})" if t["act"] else body


def _multi(t):
    params = ", ".join(t["vars"])
    bodies = ", ".join(f"({expr_source(b)}).astype({p['dtype']!r})"
                       for b, p in zip(t["bodies"], t["parts"]))
    return [f"{_lhs(t)} = te.compute({_shape(t)}, lambda {params}: ({bodies}), "
            f"name={t['name']!r})"]


def _scan(t):
    dtype = f", dtype={t['out_dtype']!r}" if t.get("out_dtype") else ""
    excl = ", exclusive=True" if t["exclusive"] else ""
    return [f"{t['name']} = te.{t['fn']}({t['src']}, axis={t['axis']}{dtype}{excl}, "
            f"name={t['name']!r})"]


def _scatter_add(t):
    return [f"{t['name']} = te.scatter_add({_shape(t)}, {t['index']}, {t['updates']}, "
            f"axis={t['axis']}, name={t['name']!r})"]


def _histogram(t):
    weights = f", weights={t['weights']}" if t["weights"] else ""
    return [f"{t['name']} = te.histogram({t['data']}, {t['bins']}{weights}, "
            f"dtype={t['dtype']!r}, name={t['name']!r})"]


def _extern(t):
    from .extern_fuzz import symbol
    return [f"{t['name']} = te.extern({_shape(t)}, [{t['src']}], "
            f"{symbol(t['dtype'], len(t['shape']))!r}, library=_fuzz_lib(), name={t['name']!r})"]


def _embedding(t):
    return [f"{t['name']} = te.embedding_backward({t['index']}, {t['updates']}, "
            f"{t['shape'][0]}, name={t['name']!r})"]


def _scatter_minmax(t):
    j, ids, bins = f"j_{t['name']}", t["index"], t["shape"][0]
    where = f", where=te.all({ids}[{j}] >= 0, {ids}[{j}] < {bins})" if t["where"] else ""
    init = f", init={t['init']!r}" if t["init"] is not None else ""
    n = t["extent"]
    return [f"{j} = te.reduce_axis((0, {n}), name={j!r})",
            f"{t['name']} = te.scatter_reduce(({bins},), lambda: (({ids}[{j}],), "
            f"{t['updates']}[{j}]), te.{t['fn']}, axis={j}{where}{init}, name={t['name']!r})"]


_LINES = {"welford": _welford, "user_scan": _user_scan, "embedding": _embedding,
          "scatter_minmax": _scatter_minmax, "extern": _extern, "argreduce": _argreduce,
          "tuple_reduce": _tuple_reduce, "multi": _multi, "scan": _scan,
          "scatter_add": _scatter_add, "histogram": _histogram}
