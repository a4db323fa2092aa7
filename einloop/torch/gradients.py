"""The backward of a custom operator: gradient kernels generated from its declaration.

This is the one seam between the PyTorch operator and reverse-mode differentiation.
:func:`differentiate` returns ``te.gradient`` (the reverse-mode differentiation of a compute DAG,
``te.gradient(output, inputs, head)`` -> one te tensor per input, each an ordinary compute DAG):
no gradient is ever approximated here.  :func:`plan_backward` plans the backward at one
signature (a :class:`BackwardPlan`: which forward stages it reads rather than computes, and the
kernels :func:`einloop.te.partition.partition` cuts the gradients into);
:class:`GradientKernels` schedules each kernel like the forward (the log's best, or the default
schedule), builds it on first use and runs the ones a call needs.  The operator keeps one per
signature and calls it from its backward operator (a ``torch.library`` op of its own, so
torch.compile traces the backward like the forward).

Only floating-point inputs get a gradient (the others get None), and only floating-point
outputs send one back.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .. import te
from ..codegen.build import build
from ..errors import CustomOpError
from ..ir.expr import ShapeVar
from ..te.dag import ComputeDAG
from ..te.partition import cut, materialized, partition
from ..te.tensor import PlaceholderOp, Tensor
from .signature import FLOAT_DTYPES, TORCH_DTYPES, as_array, concrete_shape, empty_like_te, \
    sizes_of
from .tensor_call import TensorCall, fitted_read, plain_read


def differentiate(op):
    """The function that differentiates *op*'s declaration: ``te.gradient`` (looked up at call
    time, so a test may put another function of its signature in its place)."""
    return te.gradient


def _shape(t):
    """*t*'s shape: ints, and the size variables of a dynamic operator as they are."""
    return tuple(d if isinstance(d, ShapeVar) else int(d) for d in t.shape)


class BackwardPlan(NamedTuple):
    """What the backward of an operator computes at one signature.

    ``outputs``: the forward's outputs; ``saved``: the stages the forward writes for the
    backward (with saving; else none); ``entries``: one ``(head, grads, parts)`` per
    floating-point output: the head placeholder (the gradient arriving at that output), the
    gradient of each floating-point input (a te tensor; a placeholder where the gradient is one
    of the :attr:`given` tensors, unchanged), and the kernels computing the others
    (:func:`einloop.te.partition.partition`, reading given tensors as inputs)."""
    outputs: tuple
    saved: tuple
    entries: tuple

    @property
    def given(self) -> tuple:
        """The forward's tensors the backward reads rather than computes, in the order the
        backward operator takes them: the outputs, then the saved stages."""
        return (*self.outputs, *self.saved)


def plan_backward(op, sig, gradient, saving=False) -> BackwardPlan:
    """The :class:`BackwardPlan` of *op* at *sig*, differentiating with *gradient*
    (``te.gradient``'s signature).  With *saving*, each forward stage a gradient kernel would
    otherwise compute again (a reduction, or a stage a reduction reads) is saved by the forward
    instead, as PyTorch's autograd saves activations."""
    inputs, outputs = op.declaration(sig)
    wrt = [x for x in inputs if x.dtype in FLOAT_DTYPES]
    differentiated = []
    for out_tensor in outputs if wrt else ():
        if out_tensor.dtype not in FLOAT_DTYPES:
            continue
        head = te.placeholder(out_tensor.shape, out_tensor.dtype, f"{out_tensor.name}_grad")
        grads = list(gradient(out_tensor, wrt, head))
        if len(grads) != len(wrt) or not all(
                isinstance(g, Tensor) and _shape(g) == _shape(x) and g.dtype == x.dtype
                for g, x in zip(grads, wrt)):
            raise CustomOpError(f"{op.name}: te.gradient of output {out_tensor.name!r} did not "
                                "return one tensor per input, shaped and typed like it")
        differentiated.append((head, grads))
    candidates = _recomputed_forward_stages(outputs, differentiated) if saving else ()
    entries = _entries(differentiated, (*outputs, *candidates))
    # a candidate read only to compute another one is not needed once that one is saved
    read = {id(t.op) for _, _, parts in entries for p in parts for t in p.reads}
    read.update(id(g.op) for _, grads, _ in entries for g in grads)
    saved = tuple(t for t in candidates if id(t.op) in read)
    if len(saved) < len(candidates):
        entries = _entries(differentiated, (*outputs, *saved))
    return BackwardPlan(tuple(outputs), saved, entries)


def _recomputed_forward_stages(outputs, differentiated) -> tuple:
    """The forward's stages (not its outputs) that the gradient kernels would write, in the
    forward's order: what saving them spares the backward.  The reductions first; then the
    injective stages still written once those and the outputs are read as inputs (a padded
    copy read by a saved reduction and by one gradient reduction is computed in the latter's
    kernel, as the forward computes it, rather than saved)."""
    forward = ComputeDAG(outputs)
    output_ids = {id(o.op) for o in outputs}

    def written(given) -> set:
        ids = set()
        for _, grads in differentiated:
            computed = _computed(grads)
            if computed:
                ids.update(id(stage) for stage in materialized(computed, given))
        return ids

    stages = [o for o in forward.compute_ops if id(o) not in output_ids]
    first = written(())
    reductions = {id(o): o for o in stages if id(o) in first and forward.is_reduction(o)}
    then = written((*outputs, *(o.output() for o in reductions.values())))
    return tuple(o.output() for o in stages
                 if id(o) in reductions or (id(o) in first and id(o) in then))


def _entries(differentiated, given) -> tuple:
    """``(head, grads, parts)`` of each differentiated output, the *given* forward tensors
    read as inputs."""
    entries = []
    for head, grads in differentiated:
        computed = _computed(grads)
        parts = []
        if computed:
            cut_grads, stands_for = cut(computed, given)
            new = dict(zip(map(id, computed), cut_grads))
            grads = [stands_for.get(n.op, n) for n in (new.get(id(g), g) for g in grads)]
            parts = [p._replace(reads=tuple(stands_for.get(t.op, t) for t in p.reads))
                     for p in partition(_computed(grads))]
        entries.append((head, grads, parts))
    return tuple(entries)


def _computed(grads):
    """The gradients that are computed (not an input or given tensor as it is), each once."""
    return list(dict.fromkeys(g for g in grads if not isinstance(g.op, PlaceholderOp)))


class _Step(NamedTuple):
    """One kernel of a :class:`_Program`: it reads the values in slots *reads* and appends
    what it writes to the values (their slots are the next ones, in order)."""
    kernel: object          # a Kernel (call_addresses)
    reads: tuple            # slot per read argument
    writes: tuple           # (torch.Size, torch dtype) per written argument


class _Program(NamedTuple):
    """The gradient kernels a static call runs, resolved once per set of gradients asked for
    and of heads present: the values are numbered (the operator's inputs, then the forward's
    given tensors, then the heads present, then what each step writes), so a call is a loop
    over steps with no lookups.  ``checked``: ``(slot, shape, dtype, name)`` of each value
    from outside that a step or a result reads; ``results``: per ``wrt`` input, None if not
    needed, else ``(slot, copy)`` of each term of its gradient (``copy``: a tensor from outside
    returned as a gradient, which must be a tensor of its own)."""
    checked: tuple
    steps: tuple
    results: tuple


class GradientKernels:
    """The gradient kernels of one declaration at one signature: for each floating-point output,
    the kernels of :func:`plan_backward` (built with the operator's schedules on first
    use), run in order on the call's inputs and the head, each writing the stages it
    materializes.  A call runs only the kernels the gradients it is asked for read, of the
    outputs a gradient arrived at: a frozen weight's gradient, or an unused output's, costs
    nothing."""

    def __init__(self, op, sig, plan: BackwardPlan):
        inputs, _ = op.declaration(sig)
        self.wrt = [i for i, x in enumerate(inputs) if x.dtype in FLOAT_DTYPES]
        self.inputs, self.plan = inputs, plan
        self._op, self._kernels, self._needed_parts = op, {}, {}
        self._calls = {}                # (k, n) -> TensorCall of a static kernel
        self._programs = {}             # (needed, heads present) -> _Program (static)

    def _kernel(self, k, n):
        kernel = self._kernels.get((k, n))
        if kernel is None:
            tensors = list(self.plan.entries[k][2][n].tensors)
            name = f"{self._op.name.replace('::', '_')}_grad{k}_{n}"
            kernel = self._kernels[(k, n)] = build(self._op.schedule(tensors), tensors,
                                                   name=name)
        return kernel

    def _call(self, k, n) -> TensorCall:
        call = self._calls.get((k, n))
        if call is None:
            part = self.plan.entries[k][2][n]
            call = self._calls[(k, n)] = TensorCall(self._kernel(k, n), part.tensors,
                                                    len(part.writes))
        return call

    def needed_parts(self, k, needed) -> list:
        """Indices of output *k*'s kernels that the gradients flagged in *needed* (one bool
        per ``wrt`` input) read, directly or through other kernels, in running order."""
        key = (k, tuple(needed))
        found = self._needed_parts.get(key)
        if found is None:
            _, grads, parts = self.plan.entries[k]
            want = {id(g.op) for g, n in zip(grads, needed) if n}
            found = []
            for n in reversed(range(len(parts))):
                if any(id(t.op) in want for t in parts[n].writes):
                    found.append(n)
                    want.update(id(t.op) for t in parts[n].reads)
            found = self._needed_parts[key] = found[::-1]
        return found

    def __call__(self, inputs, heads, given, needed):
        """The gradients of the ``wrt`` inputs (torch tensors, on the CPU), given the tensors
        of the call, one head per floating-point output (None: no gradient arrived there) and
        the forward's tensors of ``plan.given``.  *needed*: one bool per ``wrt`` input; an
        input not needed gets None."""
        sizes = sizes_of(self.inputs, inputs)       # a dynamic operator's size variables
        if not sizes:
            return self._run_static(inputs, heads, given, needed)
        total = [None] * len(self.wrt)
        # made contiguous once here, not by each kernel that reads them (a head is often a
        # broadcast: the gradient of a sum)
        arrays = [a.detach().contiguous() for a in inputs]
        forward = {id(t.op): a.detach().contiguous() for t, a in zip(self.plan.given, given)}
        for k, ((head_t, grads, parts), head) in enumerate(zip(self.plan.entries, heads)):
            if head is None:
                continue
            buffers = dict(forward)
            buffers.update((id(t.op), a) for t, a in zip([*self.inputs, head_t],
                                                         [*arrays, head.detach().contiguous()]))
            for n in self.needed_parts(k, needed):
                part = parts[n]
                reads = [as_array(buffers[id(t.op)]) for t in part.reads]
                outs = [empty_like_te(t, sizes) for t in part.writes]
                self._kernel(k, n)(*reads, *[as_array(o) for o in outs])
                buffers.update((id(t.op), o) for t, o in zip(part.writes, outs))
            for i, g in enumerate(grads):
                if needed[i]:
                    o = buffers[id(g.op)]
                    o = o.clone() if isinstance(g.op, PlaceholderOp) else o
                    total[i] = o if total[i] is None else total[i] + o
        return [None if not n else t if t is not None else
                torch.zeros(concrete_shape(self.inputs[i].shape, sizes),
                            dtype=TORCH_DTYPES[self.inputs[i].dtype])
                for i, t, n in zip(self.wrt, total, needed)]

    def _run_static(self, inputs, heads, given, needed):
        """:meth:`__call__` at a static signature: the kernels run on the tensors' memory
        (:class:`_Program`), each tensor from outside checked and made contiguous once."""
        present = tuple(h is not None for h in heads)
        program = self._programs.get((tuple(needed), present))
        if program is None:
            program = self._programs[(tuple(needed), present)] = self._program(needed, present)
        outside = [*inputs, *given, *(h for h in heads if h is not None)]
        values = [None] * len(outside)
        for slot, shape, dtype, name in program.checked:
            t = outside[slot]
            fit = plain_read(t, shape, dtype)
            values[slot] = fit if fit is not None else \
                fitted_read(f"{self._op.name}'s backward", name, t, shape, dtype)
        for step in program.steps:
            written = [torch.empty(shape, dtype=dtype) for shape, dtype in step.writes]
            step.kernel.call_addresses([values[r].data_ptr() for r in step.reads]
                                       + [t.data_ptr() for t in written])
            values += written
        grads = []
        for i, terms in zip(self.wrt, program.results):
            if terms is None:
                grads.append(None)
                continue
            total = None
            for slot, copy in terms:
                t = values[slot].clone() if copy else values[slot]
                total = t if total is None else total + t
            grads.append(total if total is not None else
                         torch.zeros(concrete_shape(self.inputs[i].shape, {}),
                                     dtype=TORCH_DTYPES[self.inputs[i].dtype]))
        return grads

    def _program(self, needed, present) -> _Program:
        """The :class:`_Program` of the gradients flagged in *needed* with the heads flagged in
        *present* (one bool per floating-point output)."""
        base = [*self.inputs, *self.plan.given]
        slot_of = {id(t.op): i for i, t in enumerate(base)}
        heads = [e[0] for e, p in zip(self.plan.entries, present) if p]
        n_outside = len(base) + len(heads)
        steps, terms, used = [], [[] for _ in self.wrt], set()
        next_slot, head_slot = n_outside, len(base)
        for k, ((head_t, grads, parts), p) in enumerate(zip(self.plan.entries, present)):
            if not p:
                continue
            local = dict(slot_of)
            local[id(head_t.op)] = head_slot
            head_slot += 1
            for n in self.needed_parts(k, needed):
                part, call = parts[n], self._call(k, n)
                reads = tuple(local[id(t.op)] for t in part.reads)
                used.update(reads)
                for t in part.writes:
                    local[id(t.op)] = next_slot
                    next_slot += 1
                steps.append(_Step(call.kernel, reads, call.write_specs))
            for i, g in enumerate(grads):
                if needed[i]:
                    slot = local[id(g.op)]
                    used.add(slot)
                    terms[i].append((slot, slot < n_outside))
        checked = []
        for slot in sorted(s for s in used if s < n_outside):
            t = base[slot] if slot < len(base) else heads[slot - len(base)]
            checked.append((slot, torch.Size(concrete_shape(t.shape, {})),
                            TORCH_DTYPES[t.dtype], t.name))
        results = tuple(tuple(ts) if n else None for ts, n in zip(terms, needed))
        return _Program(tuple(checked), tuple(steps), results)
