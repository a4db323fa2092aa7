"""The backward of a custom operator: gradient kernels generated from its declaration.

This is the one seam between the PyTorch operator and reverse-mode differentiation:
:func:`gradient_kernels` takes the operator and a call's signature and returns a callable
``(inputs, grad_outputs) -> one gradient (or None) per input`` that the operator's registered
backward calls.  It differentiates the declaration with ``te.gradient(output, inputs, head)``
(one te tensor per input, each an ordinary compute DAG), schedules each output's gradient
kernel like the forward (the log's best, or the default schedule) and builds it; the operator
keeps the result per signature.

Until ``te.gradient`` exists, a backward through the operator raises
:class:`~einloop.errors.CustomOpError` saying so; no gradient is ever approximated here.
Integer and bool inputs get no gradient (None), and integer or bool outputs send none back.
"""
from __future__ import annotations

import torch

from .. import te
from ..codegen.build import build
from ..errors import CustomOpError
from ..te.tensor import PlaceholderOp
from .signature import FLOAT_DTYPES, TORCH_DTYPES


def gradient_kernels(op, sig):
    """The gradient kernels of *op* (a :class:`~.op.CustomOp`) at signature *sig*."""
    gradient = getattr(te, "gradient", None)
    if gradient is None:
        raise CustomOpError(f"{op.name}: backward needs te.gradient, which this einloop does not "
                            "have yet; register the operator with backward=False, or compute "
                            "under torch.no_grad() / with inputs that do not require grad")
    return GradientKernels(op, sig, gradient)


def _shape(t):
    return tuple(int(d) for d in t.shape)


class GradientKernels:
    """For each floating-point output of the declaration at one signature: one kernel taking
    ``(*inputs, head)`` (head: the gradient arriving at that output) and writing the gradient
    of every floating-point input, as ``gradient`` declares them."""

    def __init__(self, op, sig, gradient):
        inputs, outputs = op.declaration(sig)
        self.n_inputs = len(inputs)
        wrt = [i for i, x in enumerate(inputs) if x.dtype in FLOAT_DTYPES]
        self.parts = []        # (output index, wrt, kernel or None, grads, head)
        for k, out in enumerate(outputs):
            if out.dtype not in FLOAT_DTYPES or not wrt:
                continue
            head = te.placeholder(out.shape, out.dtype, f"{out.name}_grad")
            grads = list(gradient(out, [inputs[i] for i in wrt], head))
            computed = [g for g in grads if not isinstance(g.op, PlaceholderOp)]
            kernel = None
            if computed:
                tensors = [*inputs, head, *computed]
                kernel = build(op.schedule(tensors), tensors,
                               name=f"{op.name.replace('::', '_')}_grad{k}")
            self.parts.append((k, wrt, kernel, grads, inputs + [head]))

    def __call__(self, inputs, grad_outputs):
        result = [None] * self.n_inputs
        arrays = [a.detach().contiguous() for a in inputs]
        for k, wrt, kernel, grads, params in self.parts:
            g = grad_outputs[k] if k < len(grad_outputs) else None
            if g is None:
                continue
            given = arrays + [g.detach().contiguous()]
            outs = []
            for grad in grads:
                if isinstance(grad.op, PlaceholderOp):     # the gradient is an argument itself
                    outs.append(given[next(j for j, p in enumerate(params) if p is grad)])
                else:
                    outs.append(torch.empty(_shape(grad), dtype=TORCH_DTYPES[grad.dtype]))
            if kernel is not None:
                written = [o.numpy() for o, grad in zip(outs, grads)
                           if not isinstance(grad.op, PlaceholderOp)]
                kernel(*[a.numpy() for a in given], *written)
            for i, o in zip(wrt, outs):
                result[i] = o if result[i] is None else result[i] + o
        return tuple(result)
