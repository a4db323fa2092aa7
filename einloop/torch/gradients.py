"""The backward of a custom operator: gradient kernels generated from its declaration.

This is the one seam between the PyTorch operator and reverse-mode differentiation.
:func:`differentiate` returns ``te.gradient`` (the reverse-mode differentiation of a compute DAG,
``te.gradient(output, inputs, head)`` -> one te tensor per input, each an ordinary compute DAG):
no gradient is ever approximated here.  :class:`GradientKernels` differentiates the declaration at one signature,
schedules each gradient kernel like the forward (the log's best, or the default schedule) and
builds it; the operator keeps one per signature and calls it from its backward operator (a
``torch.library`` op of its own, so torch.compile traces the backward like the forward).

Only floating-point inputs get a gradient (the others get None), and only floating-point
outputs send one back.
"""
from __future__ import annotations

import torch

from .. import te
from ..codegen.build import build
from ..errors import CustomOpError
from ..ir.expr import ShapeVar
from ..te.dag import ComputeDAG
from ..te.tensor import PlaceholderOp, Tensor
from .signature import FLOAT_DTYPES, TORCH_DTYPES, concrete_shape, sizes_of


def differentiate(op):
    """The function that differentiates *op*'s declaration: ``te.gradient`` (looked up at call
    time, so a test may put another function of its signature in its place)."""
    return te.gradient


def _shape(t):
    """*t*'s shape: ints, and the size variables of a dynamic operator as they are."""
    return tuple(d if isinstance(d, ShapeVar) else int(d) for d in t.shape)


def _empty(t, sizes):
    return torch.empty(concrete_shape(t.shape, sizes), dtype=TORCH_DTYPES[t.dtype])


def gradient_declarations(op, sig, gradient) -> list:
    """What the backward of *op* computes at *sig*, one entry per floating-point output:
    ``(head, grads, tensors)``: the head placeholder (the gradient arriving at that output), the
    gradient of each floating-point input (a te tensor; an input itself where the gradient is
    the head, unchanged), and the kernel's arguments ``[*inputs, head, *computed gradients]``
    (None when nothing is computed)."""
    inputs, outputs = op.declaration(sig)
    wrt = [x for x in inputs if x.dtype in FLOAT_DTYPES]
    if not wrt:
        return []
    out = []
    for out_tensor in outputs:
        if out_tensor.dtype not in FLOAT_DTYPES:
            continue
        head = te.placeholder(out_tensor.shape, out_tensor.dtype, f"{out_tensor.name}_grad")
        grads = list(gradient(out_tensor, wrt, head))
        if len(grads) != len(wrt) or not all(
                isinstance(g, Tensor) and _shape(g) == _shape(x) and g.dtype == x.dtype
                for g, x in zip(grads, wrt)):
            raise CustomOpError(f"{op.name}: te.gradient of output {out_tensor.name!r} did not "
                                "return one tensor per input, shaped and typed like it")
        computed = [g for g in grads if not isinstance(g.op, PlaceholderOp)]
        out.append((head, grads, _kernel_arguments([*inputs, head], computed)))
    return out


def _kernel_arguments(given, computed):
    """The arguments of the kernel computing *computed*: those of *given* (the inputs and the
    head) that it reads, in order, then *computed* (None when nothing is computed).  A gradient
    need not read every input (a bias's gradient is the head, summed)."""
    if not computed:
        return None
    read = {id(op) for op in ComputeDAG(computed).ops}
    return [t for t in given if id(t.op) in read] + computed


class GradientKernels:
    """The gradient kernels of one declaration at one signature: for each floating-point output,
    one kernel taking ``(*inputs, head)`` (head: the gradient arriving at that output) and
    writing the gradient of each floating-point input (``wrt``)."""

    def __init__(self, op, sig, gradient):
        inputs, _ = op.declaration(sig)
        self.wrt = [i for i, x in enumerate(inputs) if x.dtype in FLOAT_DTYPES]
        self.inputs = inputs
        self.parts = []     # (kernel or None, grads, [*inputs, head], what it reads) per output
        for k, (head, grads, tensors) in enumerate(gradient_declarations(op, sig, gradient)):
            kernel = None if tensors is None else build(
                op.schedule(tensors), tensors, name=f"{op.name.replace('::', '_')}_grad{k}")
            given = [*inputs, head]
            reads = [] if tensors is None else [n for n, t in enumerate(given)
                                                if any(t is u for u in tensors)]
            self.parts.append((kernel, grads, given, reads))

    def __call__(self, inputs, heads):
        """The gradients of the ``wrt`` inputs, given the tensors of the call and one head per
        floating-point output (torch tensors, on the CPU)."""
        total = [None] * len(self.wrt)
        sizes = sizes_of(self.inputs, inputs)       # a dynamic operator's size variables
        arrays = [a.detach().contiguous() for a in inputs]
        for (kernel, grads, params, reads), head in zip(self.parts, heads):
            given = arrays + [head.detach().contiguous()]
            outs = [given[next(j for j, p in enumerate(params) if p is g)].clone()
                    if isinstance(g.op, PlaceholderOp) else _empty(g, sizes) for g in grads]
            if kernel is not None:
                kernel(*[given[n].numpy() for n in reads],
                       *[o.numpy() for o, g in zip(outs, grads)
                         if not isinstance(g.op, PlaceholderOp)])
            total = [o if t is None else t + o for t, o in zip(total, outs)]
        return [t if t is not None else torch.zeros(concrete_shape(self.inputs[i].shape, sizes),
                                                     dtype=TORCH_DTYPES[self.inputs[i].dtype])
                for i, t in zip(self.wrt, total)]
