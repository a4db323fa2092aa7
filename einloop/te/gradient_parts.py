"""te.gradient's adjoints of sum scatters and of multi-output stages.

Both are brought back to stages :func:`einloop.te.gradient.gradient` already differentiates in
gather form (its ``_backward``, passed in as *backward*), so their reads are solved the same way:

* A sum scatter ``H[index(f, r)] += value(f, r) where cond`` (``te.scatter_add``,
  ``te.histogram`` with weights, ``te.embedding_backward``, ``te.scatter_reduce`` with
  ``te.sum``) is, for what *value* reads, the compute ``V[f, r] = value(f, r)`` over its free
  axes and its domain, whose adjoint is the output's adjoint *gathered* at the scattered index:
  ``dV[f, r] = dH[index(f, r)]`` where *cond* holds, 0 elsewhere.  An index outside the output
  was clamped into it, and the gather reads the same clamped element.  The index (integers,
  often read from data) has no gradient.  A max/min scatter, whose adjoint would go to the
  update that won each element, is refused.
* A multi-output stage gives each float output's adjoint to the stage that output alone would
  be: an elementwise part as its own compute, a ``sum``/``max``/``min``/``prod`` part as its
  reduction, and the value of ``te.argmax``/``te.argmin`` as a sum over the reduced axis of the
  value where the axis is at the stage's index output (the first extremum: NumPy's and
  PyTorch's choice).  An integer output (an argmax's index) has none.  Welford's summaries
  ``(count, mean, M2)`` of sources ``(c, m, q)`` (``te.welford``: ``(1, x, 0)``) are, exactly,
  ``count = sum c``, ``mean = sum c m / count`` and ``M2 = sum q + c (m - mean)^2``: sums
  that read the stage's own count and mean, which carry no adjoint back (M2's derivative
  through the mean is ``-2 sum c (m - mean) = 0``; the mean's through the count is not, so a
  count source that depends on an input is refused).  Other tuple reductions (a
  ``te.comm_reducer`` on tuples), whose combine has no rule here, are refused.
"""
from __future__ import annotations

from ..errors import TEError
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import structural_key, substitute, walk
from .compute import _declare
from .reduce import sum as _sum
from .scatter import unpack_update
from .tensor import ComputeOp, IterKind, IterVar
from .tuple_builtins import argmax_reducer, argmin_reducer, welford_reducer
from .tuple_reduce import ReducerPart, _combiner


def scatter_adjoint(op, adj, needed, backward, ones) -> list:
    """``(tensor, contribution)`` for the tensors the values of scatter *op* read, given the
    adjoint *adj* of its output (*ones*: the constant 1)."""
    if op.reducer is not _sum:
        raise TEError(f"te.gradient: stage {op.name} is a scatter combining its updates with "
                      f"{op.reducer.name}; its adjoint would go to the update that won each "
                      "element, which te.gradient does not track. Only sum scatters "
                      "(te.scatter_add, te.histogram with weights, te.embedding_backward, "
                      "te.scatter_reduce with te.sum) are differentiated")
    value, index, cond = unpack_update(op.body)
    axes, sub = _fresh(tuple(op.axis) + tuple(op.reduce_axis), IterKind.DATA)
    value = substitute(value, sub)
    index = tuple(substitute(ix, sub) for ix in index)
    cond = None if cond is None else substitute(cond, sub)
    one, zero = E.const(1, op.dtype), E.const(0, op.dtype)
    if adj is ones:
        seed = ones if cond is None else \
            _declare(f"{op.name}.grad.gathered", axes, E.Select(cond, one, zero, op.dtype))
    else:
        got = adj[index]
        body = got if cond is None else E.Select(cond, got, zero, op.dtype)
        seed = _declare(f"{op.name}.grad.gathered", axes, body)
    return list(backward(ComputeOp(op.name, axes, value), seed, needed))


def multi_output_adjoint(op, adjs, needed, backward, ones) -> list:
    """``(tensor, contribution)`` for the tensors multi-output stage *op* reads, given the
    adjoint of each of its outputs (*adjs*, None where an output gets none)."""
    parts = []
    needed = needed - {id(op)}           # its own outputs read by its parts: no adjoint
    for k, adj in enumerate(adjs):
        if adj is None or not dtypes.is_float(op.output_dtype(k)):
            continue
        axes, sub = _fresh(op.axis, IterKind.DATA)
        body = substitute(_part_body(op, k, needed), sub)
        if isinstance(body, E.Reduce):
            raxes, rsub = _fresh(body.axes, IterKind.REDUCE)
            cond = None if body.condition is None else substitute(body.condition, rsub)
            body = E.Reduce(body.reducer, substitute(body.source, rsub), tuple(raxes), cond,
                            body.dtype)
        alone = ComputeOp(f"{op.name}.v{k}", axes, body, body.axes
                          if isinstance(body, E.Reduce) else ())
        parts += list(backward(alone, adj, needed))
    return parts


def _part_body(op, k, needed):
    """Float output *k* of *op* as the body of a stage of its own (see the module doc); of
    te.argmax/argmin that is the value, output 1 (the index, output 0, is an integer)."""
    body = op.bodies[k]
    if not isinstance(body, E.Reduce) or not isinstance(body.reducer, ReducerPart):
        return body
    builtin = _builtin_of(body.reducer.combiner)
    if builtin is None:
        raise TEError(f"te.gradient: stage {op.name} is a tuple reduction with "
                      f"{body.reducer.combiner.name}, whose combine has no derivative rule "
                      "here; te.argmax/te.argmin's value and te.welford are differentiated. "
                      "Write the reduction with sum/max/min/prod stages to differentiate it")
    at = tuple(iv.var for iv in op.axis)
    sources = [b.source for b in op.bodies]
    zero = E.const(0, body.dtype)
    if builtin is welford_reducer:
        return _sum_of(body, _welford_term(op, k, sources, at, needed))
    hit = sources[0] == op.output(0)[at]
    return _sum_of(body, E.Select(hit, body.source, zero, body.dtype))


def _welford_term(op, k, sources, at, needed):
    """What output *k* of Welford's reduction *op* sums (see the module doc)."""
    c, m, q = sources
    if k == 0:
        return c
    if k == 1:
        if any(isinstance(x, E.TensorRead) and id(x.tensor.op) in needed for x in walk(c)):
            raise TEError(f"te.gradient: the counts of the Welford reduction {op.name} ({c}) "
                          "depend on an input; te.gradient differentiates its means and M2 "
                          "with respect to the values, not the counts")
        return c * m / op.output(0)[at]
    d = m - op.output(1)[at]
    return q + c * d * d


def _sum_of(like, source):
    """A sum of *source* over the axes and condition of reduction *like*."""
    return E.Reduce(_sum, source, like.axes, like.condition, like.dtype)


def _builtin_of(combiner):
    """te.argmax's, te.argmin's or te.welford's reducer if *combiner* is its combine, else
    None (a user's reducer of the same name is told apart by its expressions)."""
    for reducer in (argmax_reducer, argmin_reducer, welford_reducer):
        if combiner.name != reducer.name:
            continue
        builtin = _combiner(reducer, combiner.dtypes)
        if [structural_key(e) for e in builtin.combined] == \
                [structural_key(e) for e in _renamed(combiner, builtin)]:
            return reducer
    return None


def _renamed(combiner, like):
    """*combiner*'s combine over the operand variables of *like* (so the two compare)."""
    mapping = dict(zip(combiner.lhs, like.lhs))
    mapping.update(zip(combiner.rhs, like.rhs))
    return [substitute(e, mapping) for e in combiner.combined]


def _fresh(ivs, kind):
    """New IterVars (of *kind*, from 0) standing for *ivs*, and the substitution to them."""
    out, sub = [], {}
    for iv in ivs:
        nv = IterVar(E.Var(iv.name), 0, iv.extent, kind)
        out.append(nv)
        sub[iv.var] = nv.var + iv.start if isinstance(iv.start, int) and iv.start else nv.var
    return tuple(out), sub
