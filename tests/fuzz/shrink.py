"""Reduce a failing case while its failure signature stays the same.

Candidates, coarse first: drop the whole schedule, single schedule steps (with the steps that use
what they made), extra outputs, a reduction's ``where``, then replace expression nodes by one of
their children or by a constant of their dtype, then shrink extents.  After each change the case
is pruned (tensors no output needs, steps naming what no longer exists) so every candidate is a
well-formed case.  Greedy: the first candidate that keeps the signature is taken, and the search
starts again from it, until nothing helps or the budget is spent.
"""
from __future__ import annotations

import copy
import re
import time

from .gen_ops import owners, parts, refresh_shapes, tensor_reads, tensor_table
from .sched_lang import helper_names


def signature(outcome):
    """What identifies a failure across shrinking: status, where, and the gist of the message."""
    status, phase = outcome["status"], outcome["phase"].split("/")[0]
    if status == "wrong":                  # which schedule, and the dtype of the wrong output
        first = outcome["msg"].split("\n")[0]
        dtype = re.search(r"got np\.(\w+)\(", first)
        return status, first.split("/")[0].split(":")[0], dtype.group(1) if dtype else "?"
    if status in ("crash", "hang"):
        return status, outcome["etype"], phase
    return status, outcome["etype"], normalize(outcome["msg"].split("\n")[0])[:80]


def normalize(msg):
    """A message with numbers, quoted names and bracketed expressions masked, so that messages
    of one kind group together."""
    msg = re.sub(r"'[^']*'", "_", re.sub(r"\d+", "#", msg))
    while True:                                  # innermost brackets first
        masked = re.sub(r"\[[^\[\]()]*\]|\([^\[\]()]*\)", "_", msg)
        if masked == msg:
            return msg
        msg = masked


# pruning ------------------------------------------------------------------------------------------

_USES = ("loop", "x", "y", "parent", "tensor")


def _step_uses(st):
    used = [st[k] for k in _USES if k in st]
    return used + st.get("loops", []) + st.get("readers", [])


def _step_defines(st):
    out = st.get("out", [])
    out = [out] if isinstance(out, str) else list(out)
    return out + st.get("axis", []) + st.get("reduce_axis", [])


def prune(case):
    """Drop tensors no output needs and steps that name something undefined (in place)."""
    needed, todo = set(), list(case["outputs"])
    by_name = {p["name"]: t for t in case["tensors"] for p in parts(t)}
    while todo:
        n = todo.pop()
        if n in needed:
            continue
        needed.add(n)
        if by_name[n]["kind"] != "placeholder":
            todo += tensor_reads(by_name[n])
    kept = {owners(case)[n] for n in needed}
    case["tensors"] = [t for t in case["tensors"] if t["name"] in kept]
    case["args"] = [a for a in case["args"] if a in needed]
    defined, steps = set(tensor_table(case)) | helper_names(case), []
    for st in case["schedule"]:
        if st["p"] == "cache_read":
            st["readers"] = [r for r in st["readers"]
                             if r in defined and st["tensor"] in _reads_of(case, r)]
            if not st["readers"]:
                continue
        if all(u in defined for u in _step_uses(st)):
            steps.append(st)
            defined.update(_step_defines(st))
    case["schedule"] = steps
    return case


def _reads_of(case, name):
    t = next((t for t in case["tensors"] if name in (p["name"] for p in parts(t))), None)
    return tensor_reads(t) if t is not None and t["kind"] != "placeholder" else []


# candidates ---------------------------------------------------------------------------------------

def _schedule_candidates(case):
    if case["schedule"]:
        yield {**case, "schedule": []}
    for k in range(len(case["schedule"]) - 1, -1, -1):
        yield {**case, "schedule": case["schedule"][:k] + case["schedule"][k + 1:]}


def _output_candidates(case):
    if len(case["outputs"]) > 1:
        for n in case["outputs"]:
            yield {**case, "outputs": [o for o in case["outputs"] if o != n],
                   "args": [a for a in case["args"] if a != n]}
    for k, t in enumerate(case["tensors"]):
        if t.get("where") is not None:
            yield _with_tensor(case, k, {**t, "where": None})


def _with_tensor(case, k, t):
    return {**case, "tensors": case["tensors"][:k] + [t] + case["tensors"][k + 1:]}


def dtype_of(e, tensors):
    """The dtype of an expression node (None for a Python literal)."""
    kind = e[0]
    if kind == "var":
        return "int64"
    if kind == "lit":
        return None
    if kind in ("const",):
        return e[2]
    if kind == "nan":
        return e[1]
    if kind == "cast":
        return e[1]
    if kind in ("cmp", "and", "or", "not", "all", "any"):
        return "bool"
    if kind == "read":
        return tensors[e[1]]["dtype"]
    parts = e[1:] if kind == "neg" else e[2:]           # bin, mm, call, select
    return next((d for d in (dtype_of(p, tensors) for p in parts) if d is not None), None)


def _nodes(e, path=()):
    """(path, node) of every expression node, outermost first."""
    if not isinstance(e, list) or not e or not isinstance(e[0], str):
        return
    yield path, e
    for k, c in enumerate(e):
        if isinstance(c, list):
            if c and isinstance(c[0], str):
                yield from _nodes(c, path + (k,))
            else:                          # a list of nodes (indices, conditions)
                for j, x in enumerate(c):
                    yield from _nodes(x, path + (k, j))


def _replace(e, path, new):
    if not path:
        return new
    e = list(e)
    e[path[0]] = _replace(e[path[0]], path[1:], new)
    return e


def _simpler(node, dtype, tensors):
    """Nodes that could stand for *node*: its children of the same dtype, then a constant."""
    kids = [c for c in node[1:] if isinstance(c, list) and c and isinstance(c[0], str)]
    for c in kids:
        if dtype_of(c, tensors) == dtype:
            yield c
    if dtype is not None and node[0] != "const":
        yield ["const", False if dtype == "bool" else 0 if dtype == "int64" else 1, dtype]


def _expr_candidates(case):
    tensors = tensor_table(case)
    for k, t in enumerate(case["tensors"]):
        for field in ("body", "where"):
            if t.get(field) is None:
                continue
            for path, node in _nodes(t[field]):
                for new in _simpler(node, dtype_of(node, tensors), tensors):
                    yield _with_tensor(case, k, {**t, field: _replace(t[field], path, new)})


def _shape_candidates(case):
    for k, t in enumerate(case["tensors"]):
        if t["kind"] in ("compute", "placeholder"):     # the others' follow their sources
            for d, ext in enumerate(t["shape"]):
                for new in dict.fromkeys((1, ext // 2)):
                    if 1 <= new < ext:
                        shape = t["shape"][:d] + [new] + t["shape"][d + 1:]
                        yield _with_tensor(case, k, {**t, "shape": shape})
        for j, ax in enumerate(t.get("reduce", [])):
            for new in ({**ax, "extent": 1}, {**ax, "extent": ax["extent"] // 2}, {**ax, "start": 0}):
                if new != ax and new["extent"] >= 1:
                    red = t["reduce"][:j] + [new] + t["reduce"][j + 1:]
                    yield _with_tensor(case, k, {**t, "reduce": red})


PASSES = (_schedule_candidates, _output_candidates, _expr_candidates, _shape_candidates)


def shrink(case, run, budget_s=180.0, log=lambda msg: None):
    """The smallest case found that *run* (case -> outcome) fails with the same signature."""
    target = signature(run(case))
    best = copy.deepcopy(case)
    deadline = time.monotonic() + budget_s
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for make in PASSES:
            while time.monotonic() < deadline:
                for cand in make(best):
                    cand = prune(refresh(copy.deepcopy(cand)))
                    if signature(run(cand)) == target:
                        best, changed = cand, True
                        log(f"shrink: {make.__name__} helped")
                        break
                    if time.monotonic() >= deadline:
                        break
                else:
                    break
    return best, target


def refresh(case):
    refresh_shapes(case)
    return case
