"""A whole operator's symbolic extents: finding them (:func:`shape_vars_of`) and declaring the
operator again at concrete sizes (:func:`bind_sizes`), as tuning at a size hint does."""
from __future__ import annotations

from ..arith import transform
from ..errors import TEError
from ..ir import expr as E
from .dag import ComputeDAG
from .scatter import remade
from .extern import ExternOp
from .tensor import _REDUCE_AXES, IterKind, IterVar, PlaceholderOp, placeholder


def shape_vars_of(tensors) -> tuple:
    """The symbolic extents of the operator of *tensors*, in order of first appearance (shapes
    of the DAG's operations in DAG order, then reduce axes)."""
    found = {}
    for op in ComputeDAG(_computes(tensors) or list(tensors)).ops:
        for d in tuple(op.shape) + tuple(iv.extent for iv in getattr(op, "reduce_axis", ())):
            if isinstance(d, E.ShapeVar):
                found.setdefault(id(d), d)
    for t in tensors:
        for d in t.shape:
            if isinstance(d, E.ShapeVar):
                found.setdefault(id(d), d)
    return tuple(found.values())


def bind_sizes(tensors, sizes) -> list:
    """*tensors* declared again with each symbolic extent replaced by its value in *sizes*
    ({name: int}): the same operator at one concrete size, with the same names (so a schedule's
    steps apply to both).  Reads the symbolic declaration clamped stay clamped."""
    values = {}
    for v in shape_vars_of(tensors):
        if v.name not in sizes:
            raise TEError(f"bind_sizes: no size given for the symbolic extent {v.name} (given: "
                          f"{', '.join(map(str, sizes)) or 'none'})")
        value = sizes[v.name]
        if isinstance(value, bool) or not isinstance(value, int) or value < max(v.min_value, 1):
            raise TEError(f"bind_sizes: {v.name} = {value!r}; give a positive int")
        values[id(v)] = value

    def ext(d):
        return values[id(d)] if isinstance(d, E.ShapeVar) else d

    new = {}                                     # id(old op) -> new tensor
    for op in ComputeDAG(_computes(tensors) or list(tensors)).ops:
        if isinstance(op, PlaceholderOp):
            new[id(op)] = placeholder(tuple(map(ext, op.shape)), op.dtype, op.name,
                                      op.constant)
            continue
        if isinstance(op, ExternOp):
            new[id(op)] = op.redeclared([new[id(t.op)] for t in op.inputs],
                                        tuple(map(ext, op.shape)))
            continue
        mapping = {}

        def again(iv, kind):
            nv = IterVar(E.Var(iv.name, iv.var.dtype), iv.start, ext(iv.extent), kind)
            mapping[id(iv.var)] = nv.var
            return nv
        axis = tuple(again(iv, IterKind.DATA) for iv in op.axis)
        reduce_axis = tuple(again(iv, IterKind.REDUCE) for iv in op.reduce_axis)
        by_var = {id(iv.var): iv for iv in reduce_axis}
        for iv in reduce_axis:
            _REDUCE_AXES[id(iv.var)] = iv

        def fn(x):
            if isinstance(x, E.ShapeVar):
                return E.const(values[id(x)]) if id(x) in values else None
            if isinstance(x, E.Var):
                return mapping.get(id(x))
            if isinstance(x, E.TensorRead):
                return E.TensorRead(new[id(x.tensor.op)].op.output(x.tensor.value_index),
                                    x.indices, x.dtype)
            if isinstance(x, E.Reduce):
                return E.Reduce(x.reducer, x.source,
                                tuple(by_var.get(id(mapping.get(id(a.var), a.var)), a)
                                      for a in x.axes), x.condition, x.dtype)
            return None
        new[id(op)] = remade(op, axis, transform(op.body, fn), reduce_axis,
                             op.attrs).output()
    return [new[id(t.op)].op.output(t.value_index) for t in tensors]


def _computes(tensors):
    return [t for t in tensors if hasattr(t.op, "body") or isinstance(t.op, ExternOp)]
