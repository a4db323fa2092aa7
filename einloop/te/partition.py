"""Cutting an operator into kernels: which stages are written to memory, and each kernel's DAG.

One kernel per operator is right for what users declare, but not for what ``te.gradient``
generates: a gradient DAG computes several outputs (one per input) through several reductions
(the transposed products of a matmul, the forward's reductions computed again), and a schedule of
all of it in one loop nest either serialises them or recomputes an elementwise stage in every
multiply-add of the reduction that reads it.  :func:`partition` cuts such a DAG the way PyTorch's
autograd or Inductor would run it, into kernels that each hold one reduction:

- a stage is *materialized* (written to a buffer by the kernel that computes it, read by the
  others) when it is an output, a reduction, or read by a reduction (an elementwise stage
  inlined into a reduction is recomputed at every step of it), except a cheap injective stage
  whose one reader is a reduction (the padded copy of a convolution's input or output
  gradient): it stays in that reduction's kernel, whose schedule chooses between a buffer of
  its own and computing it inline, as for the forward's padding, which spares a kernel call and
  a pass over memory;
- every other stage is computed inside each kernel that reads it (the schedule inlines it);
- a reduction read only by one elementwise stage, point for point, that reads no other
  reduction, stays in that stage's kernel (the epilogue fusion of a matmul with its bias).

Layout is the schedule's business, not the cut's: a reduction whose last axis is shorter than a
vector (a convolution's weight gradient ends in the 3 of its window) is one kernel, which the
auto-scheduler vectorizes along another axis (its vector-axis rule) with an accumulator stored
in that order.

:func:`cut` is the rewrite underneath: the operator again, with chosen stages read as inputs.
"""
from __future__ import annotations

from typing import NamedTuple

from ..arith import transform
from ..ir import expr as E
from .dag import ComputeDAG
from .extern import ExternOp
from .tensor import PlaceholderOp, placeholder
from .scan import is_scan, redeclare_scan
from .scatter import remade


def cut(outputs, at) -> tuple:
    """``(outputs', inputs)``: *outputs* declared again with each stage of *at* (tensors) read as
    a placeholder of the same name, shape and dtype.  Stages that read no stage of *at* are kept
    as they are (the same objects, so placeholders stay the caller's); *inputs* maps each new
    placeholder's op to the tensor of *at* it stands for."""
    at_ops = {id(t.op): t for t in at}
    new, stands_for = {}, {}

    def rebuilt(op):
        if id(op) in new:
            return new[id(op)]
        if id(op) in at_ops:
            p = placeholder(op.shape, op.dtype, op.name)
            stands_for[p.op] = at_ops[id(op)]
            new[id(op)] = p
            return p
        if isinstance(op, PlaceholderOp):
            new[id(op)] = op.output()
            return new[id(op)]
        changed = {}
        for t in op.input_tensors:
            r = rebuilt(t.op)
            if r.op is not t.op:
                changed[id(t.op)] = r
        if not changed:
            new[id(op)] = op.output()
            return new[id(op)]
        if is_scan(op):
            new[id(op)] = redeclare_scan(op, changed)
            return new[id(op)]
        if isinstance(op, ExternOp):
            new[id(op)] = op.redeclared([changed.get(id(t.op), t) for t in op.inputs])
            return new[id(op)]

        def redirect(x):
            if isinstance(x, E.TensorRead) and id(x.tensor.op) in changed:
                return E.TensorRead(changed[id(x.tensor.op)].op.output(x.tensor.value_index),
                                    x.indices, x.dtype)
            return None
        new[id(op)] = remade(op, op.axis, transform(op.body, redirect), op.reduce_axis,
                             op.attrs).output()
        return new[id(op)]

    for op in ComputeDAG(list(outputs)).ops:      # post-order: producers first
        rebuilt(op)
    return [new[id(t.op)].op.output(t.value_index) for t in outputs], stands_for


class KernelPart(NamedTuple):
    """One kernel of a partitioned operator.

    ``tensors`` are its arguments as it is built: the inputs it reads (the operator's
    placeholders, or placeholders standing for stages other parts materialize), then the stages
    it writes.  ``reads`` gives, for each input argument, the tensor of the original operator
    it is (a placeholder or a materialized stage); ``writes`` the original stages it writes."""
    tensors: tuple
    reads: tuple
    writes: tuple


def materialized(outputs, given=()) -> list:
    """The stages of the DAG of *outputs* that :func:`partition` writes to memory, in
    post-order (see the module's docstring), when the stages of *given* (tensors) are read as
    inputs rather than computed: those are neither written nor count as readers."""
    dag = ComputeDAG(outputs)
    out_ids = {id(t.op) for t in dag.outputs}
    given_ids = {id(t.op) for t in given}
    keep = []
    for op in dag.compute_ops:
        if id(op) in given_ids:
            continue
        readers = [c for c in dag.consumers(op) if id(c) not in given_ids]
        if id(op) in out_ids or dag.is_reduction(op):
            keep.append(op)
        elif any(dag.is_reduction(c) for c in readers) \
                and not _stays_with_its_reader(dag, op, readers):
            keep.append(op)
    return keep


def _stays_with_its_reader(dag, op, readers) -> bool:
    """Is injective stage *op*, read by a reduction, computed in that reduction's kernel rather
    than written by a kernel of its own?  When that reduction is its only reader (of
    *readers*) and its body calls no expensive function (a select, a multiply: what a
    schedule may inline or copy within the kernel at no more cost than a kernel of its own)."""
    return len(readers) == 1 and dag.is_reduction(readers[0]) and not dag.has_expensive_call(op)


def _epilogue_of(dag, op, keep_ids, out_ids):
    """The materialized elementwise stage *op* (a reduction) can be fused into, or None."""
    if id(op) in out_ids or not dag.is_reduction(op):
        return None
    consumers = dag.consumers(op)
    if len(consumers) != 1 or dag.elementwise_consumer(op) is not consumers[0]:
        return None
    c = consumers[0]
    if id(c) not in keep_ids or dag.is_reduction(c):
        return None
    if sum(1 for p in dag.producers(c) if dag.is_reduction(p)) != 1:
        return None
    return c


def partition(outputs) -> list:
    """The kernels that compute *outputs* (a list of tensors), in an order that runs each after
    the parts it reads: :class:`KernelPart` each (see the module's docstring)."""
    outputs = list(outputs)
    dag = ComputeDAG(outputs)
    out_ids = {id(t.op) for t in dag.outputs}
    keep = materialized(outputs)
    keep_ids = {id(op) for op in keep}
    fused_into = {}                      # id(reduction) -> the epilogue it is computed in
    for op in keep:
        c = _epilogue_of(dag, op, keep_ids, out_ids)
        if c is not None:
            fused_into[id(op)] = c
    parts = []
    for op in keep:
        if id(op) in fused_into:
            continue
        inside = {id(op)} | {k for k, c in fused_into.items() if c is op}
        boundary = [o.output() for o in keep if id(o) not in inside]
        (new_out,), stands_for = cut([op.output()], boundary)
        sub = ComputeDAG([new_out])
        reads = tuple(stands_for.get(t.op, t) for t in sub.inputs)
        parts.append(KernelPart(tensors=(*sub.inputs, new_out), reads=reads,
                                writes=(op.output(),)))
    return parts


__all__ = ["cut", "materialized", "partition", "KernelPart"]
