"""The backward of a custom operator: gradient kernels generated from its declaration.

This is the one seam between the PyTorch operator and reverse-mode differentiation.
:func:`differentiate` returns ``te.gradient`` (the reverse-mode differentiation of a compute DAG,
``te.gradient(output, inputs, head)`` -> one te tensor per input, each an ordinary compute DAG),
or raises :class:`~einloop.errors.CustomOpError` while einloop has none: no gradient is ever
approximated here.  :class:`GradientKernels` differentiates the declaration at one signature,
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
from ..te.tensor import PlaceholderOp, Tensor
from .signature import FLOAT_DTYPES, TORCH_DTYPES


def differentiate(op):
    """``te.gradient``, or a CustomOpError naming *op* when einloop has none yet."""
    gradient = getattr(te, "gradient", None)
    if gradient is None:
        raise CustomOpError(f"{op.name}: backward needs te.gradient, which this einloop does not "
                            "have yet; register the operator with backward=False, or compute "
                            "under torch.no_grad() / with inputs that do not require grad")
    return gradient


def _shape(t):
    return tuple(int(d) for d in t.shape)


def _empty(t):
    return torch.empty(_shape(t), dtype=TORCH_DTYPES[t.dtype])


class GradientKernels:
    """The gradient kernels of one declaration at one signature: for each floating-point output,
    one kernel taking ``(*inputs, head)`` (head: the gradient arriving at that output) and
    writing the gradient of each floating-point input (``wrt``)."""

    def __init__(self, op, sig, gradient):
        inputs, outputs = op.declaration(sig)
        self.wrt = [i for i, x in enumerate(inputs) if x.dtype in FLOAT_DTYPES]
        self.inputs = inputs
        self.parts = []                 # (kernel or None, grads, parameters) per float output
        if not self.wrt:
            return
        wrt = [inputs[i] for i in self.wrt]
        for k, out in enumerate(outputs):
            if out.dtype not in FLOAT_DTYPES:
                continue
            head = te.placeholder(out.shape, out.dtype, f"{out.name}_grad")
            grads = list(gradient(out, wrt, head))
            if len(grads) != len(wrt) or not all(
                    isinstance(g, Tensor) and _shape(g) == _shape(x) and g.dtype == x.dtype
                    for g, x in zip(grads, wrt)):
                raise CustomOpError(f"{op.name}: te.gradient of output {out.name!r} did not "
                                    "return one tensor per input, shaped and typed like it")
            computed = [g for g in grads if not isinstance(g.op, PlaceholderOp)]
            kernel = None
            if computed:
                tensors = [*inputs, head, *computed]
                kernel = build(op.schedule(tensors), tensors,
                               name=f"{op.name.replace('::', '_')}_grad{k}")
            self.parts.append((kernel, grads, [*inputs, head]))

    def __call__(self, inputs, heads):
        """The gradients of the ``wrt`` inputs, given the tensors of the call and one head per
        floating-point output (torch tensors, on the CPU)."""
        total = [None] * len(self.wrt)
        arrays = [a.detach().contiguous() for a in inputs]
        for (kernel, grads, params), head in zip(self.parts, heads):
            given = arrays + [head.detach().contiguous()]
            outs = [given[next(j for j, p in enumerate(params) if p is g)].clone()
                    if isinstance(g.op, PlaceholderOp) else _empty(g) for g in grads]
            if kernel is not None:
                kernel(*[a.numpy() for a in given],
                       *[o.numpy() for o, g in zip(outs, grads)
                         if not isinstance(g.op, PlaceholderOp)])
            total = [o if t is None else t + o for t, o in zip(total, outs)]
        return [t if t is not None else torch.zeros(_shape(self.inputs[i]),
                                                     dtype=TORCH_DTYPES[self.inputs[i].dtype])
                for i, t in zip(self.wrt, total)]
