"""Residue classes: a stage whose indices divide a data axis by a constant, computed per class.

A transposed convolution in its gather form reads ``A[(y + 1) // 2 - t]`` and ``W[(y + 1) % 2
+ 2 * t]``: along ``y`` the input index steps by one every *other* output row, and the tap
alternates.  No loop over ``y`` vectorizes that (its lanes gather), but each residue class of
``y`` modulo 2 does: with ``y = 2 * q + r``, ``(2q + r + 1) // 2 = q + (r + 1) // 2`` is affine in
``q`` and the tap is fixed per class.  A hand schedule writes one small convolution per class;
this module rewrites a stage so that the auto-scheduler gets the same thing from any
declaration:

    Y.res[r_1.., other axes, with each split axis v replaced by v.quot] = body(v = c * v.quot + v.res)
    Y[..., v, ...] = Y.res[v % c .., ..., v // c, ...]

The residue axes come first, so each class is a dense sub-problem with its own contiguous
output; ``Y`` becomes a copy out of it.  :func:`residue_splits` finds the axes and factors in a
stage's indices; :func:`residue_ops` builds the two operations (the ``split_residues`` schedule
primitive and :func:`with_residues`, the same rewrite on a DAG, share it).
"""
from __future__ import annotations

import math

from ..arith import simplify
from ..arith.linear import affine_in
from ..ir import expr as E
from ..ir.expr import BinOp
from ..ir.visit import free_vars, transform, walk
from .dag import ComputeDAG
from .scatter import is_scatter
from .extern import ExternOp
from .tensor import ComputeOp, IterKind, IterVar

__all__ = ["residue_splits", "residue_ops", "with_residues", "strided_reads", "deinterleave_op",
           "reread_deinterleaved", "with_deinterleaved"]


def residue_splits(op) -> tuple:
    """``((axis, factor), ...)`` of a reduction *op* whose tensor indices take some data axis
    ``v`` through ``... // c`` or ``... % c`` (``c > 1`` a constant): ``v`` is split by the least
    common multiple of its divisors when that divides ``v``'s constant extent.  Empty when no
    axis qualifies, or *op* is not a reduction (only a reduction repeats the index math enough
    to be worth a class per residue), or a scatter (its stage cannot be rewritten so)."""
    if not isinstance(op, ComputeOp) or is_scatter(op) or not op.reduce_axis:
        return ()
    divisors = {id(iv.var): set() for iv in op.axis}
    for x in walk(op.body):
        if isinstance(x, E.TensorRead):
            for idx in x.indices:
                _divisors(idx, divisors)
    out = []
    for iv in op.axis:
        found = divisors[id(iv.var)]
        if not found or not isinstance(iv.extent, int) or iv.start != 0:
            continue
        factor = math.lcm(*found)
        if iv.extent % factor == 0 and iv.extent > factor:
            out.append((iv, factor))
    return tuple(out)


def _divisors(e, divisors):
    """Add to *divisors* (var id -> set) every constant that divides an expression of a var."""
    for x in walk(e):
        if isinstance(x, E.Binary) and x.op in (BinOp.FLOORDIV, BinOp.MOD) \
                and isinstance(x.b, E.Const) and isinstance(x.b.value, int) and x.b.value > 1:
            for v in free_vars(x.a):
                if id(v) in divisors:
                    divisors[id(v)].add(x.b.value)


def residue_ops(op, splits) -> tuple:
    """``(res_op, copy_op)``: *op* computed per residue class of the ``(axis, factor)`` pairs
    *splits* (axes of *op*, constant extents divisible by their factors) into ``<name>.res``,
    and the operation that copies it back into *op*'s shape (same axes, same name)."""
    factor_of = {id(iv): c for iv, c in splits}
    taken = {iv.name for iv in op.axis} | {iv.name for iv in op.reduce_axis}
    residues = [_fresh(f"{iv.name}.res", 0, c, IterKind.DATA, taken) for iv, c in splits]
    res_of = {id(iv): r for (iv, _), r in zip(splits, residues)}
    data, mapping = list(residues), {}
    for iv in op.axis:
        c = factor_of.get(id(iv))
        if c is None:
            nv = IterVar(E.Var(iv.name), iv.start, iv.extent, IterKind.DATA)
            mapping[iv.var] = nv.var
        else:
            nv = _fresh(f"{iv.name}.quot", 0, iv.extent // c, IterKind.DATA, taken)
            mapping[iv.var] = nv.var * c + res_of[id(iv)].var
        data.append(nv)
    reduce_axis = [IterVar(E.Var(iv.name), iv.start, iv.extent, IterKind.REDUCE)
                   for iv in op.reduce_axis]
    mapping.update((iv.var, nv.var) for iv, nv in zip(op.reduce_axis, reduce_axis))
    reduce_map = {id(iv): nv for iv, nv in zip(op.reduce_axis, reduce_axis)}
    # (c * q + r + b) // c is q + (r + b) // c: simplified, the indices are affine in the
    # quotients, which is what the schedule's rules look for
    ranges = {iv.var: (iv.start, iv.start + iv.extent - 1) for iv in data + reduce_axis
              if isinstance(iv.extent, int)}

    def rename(x):
        if isinstance(x, E.Var):
            return mapping.get(x)
        if isinstance(x, E.TensorRead):
            return E.TensorRead(x.tensor, tuple(simplify(i, ranges) for i in x.indices),
                                x.dtype)
        if isinstance(x, E.Reduce):         # its source and condition are renamed already
            return E.Reduce(x.reducer, x.source, tuple(reduce_map.get(id(a), a) for a in x.axes),
                            x.condition, x.dtype)
        return None
    res_op = ComputeOp(f"{op.name}.res", data, transform(op.body, rename), reduce_axis)
    res = res_op.output()
    index = [iv.var % factor_of[id(iv)] for iv, _ in splits]
    index += [iv.var // factor_of[id(iv)] if id(iv) in factor_of else iv.var for iv in op.axis]
    copy_op = ComputeOp(op.name, op.axis, res[tuple(index)], (), op.attrs)
    return res_op, copy_op


def _fresh(name, start, extent, kind, taken):
    out, n = name, 1
    while out in taken:
        out, n = f"{name}{n}", n + 1
    taken.add(out)
    return IterVar(E.Var(out), start, extent, kind)


def with_residues(outputs, op, splits) -> list:
    """*outputs* (tensors) of a DAG in which *op* is computed per residue class
    (:func:`residue_ops`): *op* becomes the copy, every stage downstream of it is declared again
    reading the copy; the new outputs, in order."""
    return _replaced(outputs, op, residue_ops(op, splits)[1])


def _replaced(outputs, op, new_op) -> list:
    """*outputs* with *op* replaced by *new_op* and every stage downstream declared again."""
    new = {}
    for o in ComputeDAG(outputs).ops:               # producers first
        if o is op:
            new[id(o)] = new_op
        elif isinstance(o, ComputeOp) and any(id(t.op) in new for t in o.input_tensors):
            new[id(o)] = _reread(o, new)
        elif isinstance(o, ExternOp) and any(id(t.op) in new for t in o.inputs):
            new[id(o)] = o.redeclared([new[id(t.op)].output(t.value_index) if id(t.op) in new
                                       else t for t in o.inputs]).op
    return [new[id(t.op)].output(t.value_index) if id(t.op) in new else t for t in outputs]


def _reread(op, new):
    def fn(x):
        if isinstance(x, E.TensorRead) and id(x.tensor.op) in new:
            return E.TensorRead(new[id(x.tensor.op)].output(x.tensor.value_index), x.indices,
                                x.dtype)
        return None
    return ComputeOp(op.name, op.axis, transform(op.body, fn), op.reduce_axis, op.attrs)


# the read side: a strided input deinterleaved -----------------------------------------------------

def strided_reads(op) -> tuple:
    """``((tensor, stride), ...)``: the tensors a reduction *op* reads with the last index
    ``stride * v + rest`` (``v`` its last data axis, ``stride > 1`` a constant, ``rest`` free of
    ``v``) and ``v`` nowhere else in that read: a strided convolution's ``Pad[..., 2 * x + s]``.
    A vector loop over ``v`` would gather such a read; after :func:`deinterleave_op` it loads
    contiguously.  One entry per tensor (a tensor read with two strides is left alone); none
    for a scatter (its reads cannot be redirected)."""
    if not isinstance(op, ComputeOp) or is_scatter(op) or not op.reduce_axis or not op.axis \
            or not isinstance(op.axis[-1].extent, int) or op.axis[-1].extent < 2:
        return ()
    v = op.axis[-1].var
    found = {}
    for x in walk(op.body):
        if not isinstance(x, E.TensorRead) or not x.indices:
            continue
        if not any(y is v for ix in x.indices for y in free_vars(ix)):
            continue                                # this read does not move with v
        shape = x.tensor.shape
        got = affine_in(x.indices[-1], v)
        if got is None or got[0] < 2 or not isinstance(shape[-1], int) or shape[-1] < 2 \
                or any(y is v for ix in x.indices[:-1] for y in free_vars(ix)):
            found[id(x.tensor.op)] = None           # read another way too: leave it
            continue
        prev = found.get(id(x.tensor.op), (x.tensor, got[0]))
        found[id(x.tensor.op)] = prev if prev is not None and prev[1] == got[0] else None
    return tuple(t for t in found.values() if t is not None)


def deinterleave_op(tensor, stride) -> ComputeOp:
    """``<name>.deint[..., r, q] = tensor[..., stride * q + r]``: the last dimension split into
    its residue classes modulo *stride*, each contiguous (zeros past the end)."""
    shape = tuple(tensor.shape)
    last = shape[-1]
    taken = set()
    axes = [_fresh(f"ax{d}", 0, e, IterKind.DATA, taken) for d, e in enumerate(shape[:-1])]
    r = _fresh("res", 0, stride, IterKind.DATA, taken)
    q = _fresh("quot", 0, -(-last // stride), IterKind.DATA, taken)
    at = q.var * stride + r.var
    read = tensor[tuple(iv.var for iv in axes) + (at,)]
    body = read if last % stride == 0 else E.Select(
        E.compare(E.CmpOp.LT, at, E.const(last)), read, E.const(0, tensor.dtype), tensor.dtype)
    return ComputeOp(f"{tensor.op.name}.deint", axes + [r, q], body, ())


def reread_deinterleaved(op, tensor, dop, stride) -> ComputeOp:
    """*op* reading the deinterleaved copy *dop* (:func:`deinterleave_op`) where it read
    *tensor*: ``tensor[..., i]`` becomes ``copy[..., i % stride, i // stride]``, simplified with
    the ranges of *op*'s axes (``2 * x + s`` becomes ``s % 2`` and ``x + s // 2``)."""
    ranges = {iv.var: (iv.start, iv.start + iv.extent - 1)
              for iv in list(op.axis) + list(op.reduce_axis) if isinstance(iv.extent, int)}
    copy = dop.output()

    def fn(x):
        if isinstance(x, E.TensorRead) and x.tensor.op is tensor.op:
            last = x.indices[-1]
            ix = tuple(x.indices[:-1]) + (simplify(last % stride, ranges),
                                          simplify(last // stride, ranges))
            return E.TensorRead(copy, ix, x.dtype)
        return None
    return ComputeOp(op.name, op.axis, transform(op.body, fn), op.reduce_axis, op.attrs)


def with_deinterleaved(outputs, op, tensor, stride) -> list:
    """*outputs* of a DAG in which *op* reads *tensor* through its deinterleaved copy; the
    stages downstream of *op* declared again."""
    return _replaced(outputs, op, reread_deinterleaved(op, tensor, deinterleave_op(tensor, stride),
                                                       stride))
