"""Split off a kernel's *prologue*: the loop nests that compute temporaries from constant inputs.

A tuned GEMM or convolution packs its weight into the layout its register tile reads (a
``cache_read`` stage computed at the root), and so pays, on every call, a full copy of the
weight: for a linear layer at batch 1 that copy moves as many bytes as the product itself
reads.  In a model the weights stay the same from one call to the next, so the copy need not
be made again: PyTorch's Inductor folds it into a constant when freezing, oneDNN's primitives
take a weight already reordered into their blocked format.

:func:`split_prologue` finds, among a function's top-level statements, those that read only
*constant* arguments (and temporaries such statements wrote) and write only temporaries, and
splits the function into two: the prologue, which takes those constant arguments and writes the
temporaries as its outputs, and the main function, which takes the same arguments as before
followed by those temporaries as inputs.  Running the prologue once and the main function on
every call computes what the original function computes on every call, for as long as the
constant arguments hold the same values: the caller decides when they changed
(:mod:`einloop.torch.prepack` watches the tensors' version counters).
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ...ir import expr as E
from ...ir import stmt as S
from ...ir.visit import map_stmt, stmt_exprs, transform, walk, walk_stmt


class Prologue(NamedTuple):
    """A function split by :func:`split_prologue`.

    ``prologue`` takes the arguments at positions ``sources`` of the original function (the
    constant ones it reads, in order), then writes ``hoisted`` (the temporaries it computes,
    as arguments); ``main`` takes the original arguments followed by ``hoisted``, and never
    reads those at positions ``unread`` (a weight it reads only as the prologue's packed copy:
    a caller need not check them).
    """
    prologue: S.LoweredFunc
    main: S.LoweredFunc
    sources: tuple
    hoisted: tuple
    unread: tuple = ()


def buffers_touched(stmt) -> tuple:
    """``(read, written, allocated)``: the buffers *stmt* loads from (or prefetches, or passes
    to a call as an input), stores to (or passes to a call as its output), and allocates."""
    read, written, allocated = set(), set(), set()
    for s in walk_stmt(stmt):
        for e in stmt_exprs(s):
            read.update(x.buffer for x in walk(e) if type(x) is E.Load)
        if isinstance(s, S.Store):
            written.add(s.buffer)
        elif isinstance(s, S.Allocate):
            allocated.add(s.buffer)
        elif isinstance(s, S.Prefetch):
            read.add(s.buffer)
        elif isinstance(s, S.ExternCall):
            read.update(s.inputs)
            written.add(s.output)
        elif isinstance(s, S.IntrinsicCall):
            read.update(s.buffers)               # the output tile is read and updated
            written.add(s.buffers[0])
    return read, written, allocated


def split_prologue(func: S.LoweredFunc, constant) -> Prologue | None:
    """*func* split into a prologue over its arguments at the positions *constant* (inputs
    whose values stay the same from call to call) and a main function
    (:class:`Prologue`), or None where no top-level statement computes a temporary from
    constant arguments alone.  Functions with symbolic extents are not split (their
    temporaries' sizes change with each call's sizes)."""
    if func.vars or not constant:       # (the tuner's features ask of every candidate)
        return None
    outputs = func.attrs.get("outputs", ())
    args = {b for n, b in enumerate(func.args) if n in constant and b.name not in outputs}
    temps = set(func.temps)
    stmts = func.body.stmts if isinstance(func.body, S.Seq) else (func.body,)
    touched = [buffers_touched(s) for s in stmts]
    hoisted_temps, hoisted = set(), []
    for i, (read, written, allocated) in enumerate(touched):
        if not written or not written - allocated <= temps:
            continue
        if not read - allocated <= args | hoisted_temps:
            continue
        made = written - allocated
        # no statement before it (kept in the main function) may touch what it writes
        if any(made & (r | w) for j, (r, w, _) in enumerate(touched[:i]) if j not in hoisted):
            continue
        hoisted.append(i)
        hoisted_temps |= made
    if not hoisted:
        return None
    # a hoisted temporary written again by a kept statement is no constant
    kept = [i for i in range(len(stmts)) if i not in hoisted]
    if any(touched[i][1] & hoisted_temps for i in kept):
        return None
    order = [t for t in func.temps if t in hoisted_temps]
    as_arg = {t: E.Buffer(t.name, t.dtype, t.shape, E.Scope.ARG) for t in order}
    pro_body = S.seq(*(_rebind(stmts[i], as_arg) for i in hoisted))
    pro_read = set().union(*(touched[i][0] for i in hoisted))
    sources = tuple(n for n, b in enumerate(func.args) if b in pro_read)
    made_args = tuple(as_arg[t] for t in order)
    prologue = S.LoweredFunc(f"{func.name}__prologue",
                             tuple(func.args[n] for n in sources) + made_args, (), pro_body,
                             {"outputs": tuple(t.name for t in order)})
    main = replace(func, args=func.args + made_args,
                   temps=tuple(t for t in func.temps if t not in hoisted_temps),
                   body=_rebind(S.seq(*(stmts[i] for i in kept)), as_arg))
    main_read = set().union(*(touched[i][0] for i in kept))
    unread = tuple(n for n in sources if func.args[n] not in main_read)
    return Prologue(prologue, main, sources, tuple(t.name for t in order), unread)


def _rebind(stmt, mapping):
    """*stmt* with every use of a buffer in *mapping* replaced by its image."""
    def expr_fn(e):
        return transform(e, lambda x: E.Load(mapping[x.buffer], x.index, x.dtype)
                         if type(x) is E.Load and x.buffer in mapping else None)

    def stmt_fn(s):
        if isinstance(s, S.Store) and s.buffer in mapping:
            return S.Store(mapping[s.buffer], s.index, s.value, s.nontemporal)
        if isinstance(s, S.Prefetch) and s.buffer in mapping:
            return S.Prefetch(mapping[s.buffer], s.index, s.extent)
        if isinstance(s, S.ExternCall) and (s.output in mapping or
                                            any(b in mapping for b in s.inputs)):
            return S.ExternCall(s.symbol, s.library,
                                tuple(mapping.get(b, b) for b in s.inputs),
                                mapping.get(s.output, s.output), s.extents)
        if isinstance(s, S.IntrinsicCall) and any(b in mapping for b in s.buffers):
            return replace(s, buffers=tuple(mapping.get(b, b) for b in s.buffers))
        return None
    return map_stmt(stmt, stmt_fn=stmt_fn, expr_fn=expr_fn)


__all__ = ["Prologue", "buffers_touched", "split_prologue"]
