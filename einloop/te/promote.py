"""An operator declared again with its floating-point arithmetic in a wider type.

The auto-scheduler checks each candidate against the operator's default schedule, which sums a
long reduction one element after another in the declared type: a float32 sum of 4M elements
that way is off by about 1e-3 of its value, and a candidate that adds in another order (16
lanes, then parallel chunks) lands elsewhere, closer to the true sum, and would fail a check
against the default alone.  :func:`promote_floats` gives the same operator computing in
float64, the yardstick that tells a candidate as accurate as the default from a wrong one
(:mod:`einloop.autotune.measure.runner`).
"""
from __future__ import annotations

import dataclasses

from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import transform
from ..errors import TEError
from .dag import ComputeDAG
from .scatter import remade
from .extern import ExternOp
from .tensor import ComputeOp, PlaceholderOp, placeholder
from .tuple_reduce import ReducerPart, is_part

#: the float types widened
NARROW_FLOATS = ("float16", "bfloat16", "float32")


def promote_floats(tensors, dtype="float64") -> list:
    """*tensors* (placeholders and computes of one operator, in any order) declared again with
    every float16/bfloat16/float32 value, placeholder and stage in *dtype*, in the same order.
    Integer and boolean values keep their types; a cast to a narrow float becomes a cast to
    *dtype*, so the operator computes what it declares, more precisely."""
    dtype = dtypes.canonical(dtype, "promote_floats")
    extern = next((op for op in ComputeDAG(list(tensors)).ops if isinstance(op, ExternOp)), None)
    if extern is not None:
        raise TEError(f"promote_floats: {extern.name} is an external stage (the C function "
                      f"{extern.symbol}), whose buffer types are fixed by its C code; an "
                      "operator with one cannot be widened")
    computes = [t for t in tensors if isinstance(t.op, ComputeOp)]
    new = {}

    def wide(d):
        return dtype if d in NARROW_FLOATS else d

    combiners = {}                  # id(TupleCombiner) -> its widened copy

    def widen(x):
        if is_part(x):              # a tuple reduction: its combine and identity widen too
            comb = x.reducer.combiner
            if id(comb) not in combiners:
                combiners[id(comb)] = comb.retyped(widen)
            part = ReducerPart(combiners[id(comb)], x.reducer.index)
            return dataclasses.replace(x, reducer=part, dtype=wide(x.dtype))
        if isinstance(x, E.TensorRead):
            return E.TensorRead(new[id(x.tensor.op)].op.output(x.tensor.value_index), x.indices,
                                wide(x.dtype))
        if isinstance(x, E.Const) and x.dtype in NARROW_FLOATS:
            return E.Const(float(x.value), dtype)
        if getattr(x, "dtype", None) in NARROW_FLOATS:
            return dataclasses.replace(x, dtype=dtype)
        return None

    ops = ComputeDAG(computes).ops if computes else []
    for t in tensors:
        if isinstance(t.op, PlaceholderOp) and id(t.op) not in new:
            new[id(t.op)] = placeholder(t.op.shape, wide(t.op.dtype), t.op.name,
                                        t.op.constant)
    for op in ops:                                  # post-order: producers first
        if id(op) in new:
            continue
        if isinstance(op, PlaceholderOp):
            new[id(op)] = placeholder(op.shape, wide(op.dtype), op.name, op.constant)
            continue
        new[id(op)] = remade(op, op.axis, transform(op.body, widen), op.reduce_axis,
                             op.attrs).output()
    return [new[id(t.op)].op.output(t.value_index) for t in tensors]
