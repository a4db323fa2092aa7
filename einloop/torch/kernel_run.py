"""Consecutive kernels of a partition run by one native call.

The backend's :class:`~.backend.Kernel` runs one kernel from Python: it checks the tensors it
reads, allocates the tensors it writes and its temporaries, and makes a ctypes call.  A
partition of a small model runs a dozen of them per forward pass, and that interpreter work
(tens of microseconds each) can cost more than the arithmetic.  A :class:`KernelRun` takes a
run of such kernels and plans it once:

- a tensor one kernel writes and only later kernels of the run read is an *intermediate*: it
  lives in an arena with the kernels' temporaries, placed by
  :func:`einloop.runtime.arena.plan_arena` so that buffers alive at different times share bytes;
- the tensors the run reads from outside are checked once each (not once per kernel reading
  them), and the tensors read after the run are allocated with ``torch.empty``;
- a :class:`~einloop.codegen.sequence.KernelSequence` calls the kernels in order;
- a kernel's packed weights (its :class:`~.prepack.Prepack`'s outputs, made again only when
  the weights change) are inputs of the run like the tensors it reads; a weight it reads only
  as its packed copy is passed unchecked and unread;
- a reshape of a kernel's output between them (a :class:`~.views.ViewStep`) is the same bytes
  read with another shape: the kernel after it reads the same slot, and where the graph reads
  the reshaped tensor after the run, it is made from the output once the run is done; a
  reshape of a tensor from before the run is that tensor, checked contiguous, read in place.

So a forward pass of the run costs one allocation per tensor it hands back and one native call.
The arena is kept from one forward pass to the next (a :class:`~einloop.runtime.workspace.
WorkspacePool`): allocated anew, its pages would come back fresh from the OS on every pass, and
the first kernel to write them would pay a page fault per 4 KiB.  A call may run on several
threads at once: each running call holds an arena of its own.
"""
from __future__ import annotations

import math

import torch

from ..codegen.sequence import KernelSequence, Place, Slot, Step
from ..errors import KernelRuntimeError
from ..runtime.arena import Lifetime, plan_arena
from ..runtime.workspace import WorkspacePool
from .tensor_call import PLAIN_TENSORS, at_least_1d, fitted_read, plain_read
from .views import ViewStep


class _Plan:
    """What planning a run collects: io slots of the inputs and outputs, arena buffers."""

    def __init__(self):
        self.inputs = {}            # node -> (io Slot, (shape, dtype))
        self.outputs = []           # [(io index, (shape, dtype), [(node, scalar)])]
        self.buffers = []           # [Lifetime] of the arena's buffers
        self.produced = {}          # node -> its Slot (an arena slot's value: a buffer index)
        self.aliases = {}           # a reshape of an input -> (that input, its (shape, dtype))
        self.n_io = 0

    def io(self) -> Slot:
        self.n_io += 1
        return Slot(Place.IO, self.n_io - 1)

    def arena(self, nbytes, step) -> Slot:
        """A new arena buffer alive at *step*; its slot's value is the buffer's index until
        :meth:`placed` gives it its offset."""
        self.buffers.append(Lifetime(nbytes, step, step))
        return Slot(Place.ARENA, len(self.buffers) - 1)

    def placed(self, slot, plan) -> Slot:
        """*slot* with an arena buffer's index replaced by its offset in *plan*."""
        return slot if slot.place is Place.IO else Slot(Place.ARENA, plan.offsets[slot.value])

    def alias(self, view):
        """*view* (a ViewStep of a tensor from before the run) read as the tensor it reshapes:
        the same bytes, once that tensor is checked contiguous."""
        src = view.src
        val = src.meta["val"]
        self.aliases[view.node] = self.aliases.get(
            src, (src, (torch.Size(int(d) for d in val.shape or (1,)), val.dtype)))

    def resolved(self, node):
        """The node whose tensor *node*'s bytes are: itself, or the input it reshapes."""
        return self.aliases[node][0] if node in self.aliases else node

    def read(self, node, spec, step):
        """The slot of *node* read by *step*: an intermediate (its lifetime extended), an
        output of an earlier kernel of the run, or an input of the run (a reshape of an input:
        that input)."""
        node, spec = self.aliases.get(node, (node, spec))
        where = self.produced.get(node)
        if where is not None and where.place is Place.ARENA:
            b = self.buffers[where.value]
            self.buffers[where.value] = b._replace(last=step)
            return where
        if where is not None:
            return where
        if node not in self.inputs:
            self.inputs[node] = (self.io(), spec)
        return self.inputs[node][0]


def _nbytes(spec) -> int:
    shape, dtype = spec
    return math.prod(shape) * dtype.itemsize


class KernelRun:
    """``run(env)``: *steps* (backend ``Kernel`` s without size variables and ``ViewStep`` s of
    their outputs, in an order where each runs after the ones it reads) run by one native call.
    *read_after*: the nodes read after the run (by later kernels or as the partition's
    outputs); every other node the run writes is an intermediate."""

    def __init__(self, steps, read_after):
        self.steps = tuple(steps)
        self.kernels = tuple(k for k in self.steps if not isinstance(k, ViewStep))
        needed = set(read_after)                    # with the tensors reshaped into them
        for st in reversed(self.steps):
            if isinstance(st, ViewStep) and st.node in needed:
                needed.add(st.src)
        self.views_after = tuple(st for st in self.steps
                                 if isinstance(st, ViewStep) and st.node in needed)
        plan, slots, prepacks = _Plan(), [], []
        read = set()                # the nodes some kernel reads (not only as a packed copy)
        for i, k in enumerate(self.steps):
            if isinstance(k, ViewStep):
                if k.src in plan.produced:
                    plan.produced[k.node] = plan.produced[k.src]    # the same bytes
                else:
                    plan.alias(k)
                continue
            unread = k.prepack.unread if k.prepack is not None else ()
            args = [plan.read(a, spec, i) for a, spec in zip(k.reads, k.call.read_specs)]
            read.update(plan.resolved(a) for p, a in enumerate(k.reads) if p not in unread)
            for j, spec in enumerate(k.call.write_specs):
                sinks = [(s, scalar) for s, w, scalar in zip(k.sinks, k.where, k.scalar) if w == j]
                if any(s in needed for s, _ in sinks):
                    where = plan.io()
                    plan.outputs.append((where.value, spec, sinks))
                else:
                    where = plan.arena(_nbytes(spec), i)
                for s, _ in sinks:
                    plan.produced[s] = where
                args.append(where)
            if k.prepack is not None:
                io = [plan.io() for _ in k.prepack.specs]
                prepacks.append((k.prepack, tuple(k.reads[p] for p in k.prepack.sources),
                                 tuple(slot.value for slot in io)))
                args += io
            args += [plan.arena(n, i) for n in k.call.kernel.temp_nbytes]
            slots.append(args)
        arena = plan_arena(plan.buffers)
        steps = [Step(k.call.kernel, tuple(plan.placed(a, arena) for a in args))
                 for k, args in zip(self.kernels, slots)]
        self.sequence = KernelSequence(steps, plan.n_io)
        self.arena_nbytes = arena.nbytes
        self._arenas = WorkspacePool()
        self.inputs = tuple((node, io.value, spec) for node, (io, spec) in plan.inputs.items()
                            if node in read)
        # a weight the kernels read only as a prepacked copy: its address, never read, needs no
        # check (its Prepack checks it when it packs it)
        self.unread = tuple((node, io.value) for node, (io, _) in plan.inputs.items()
                            if node not in read)
        self.outputs = tuple(plan.outputs)
        self.prepacks = tuple(prepacks)         # (Prepack, the nodes it reads, io numbers)
        self.where = f"the einloop kernels {', '.join(k.name for k in self.kernels)}"

    def run(self, env):
        # the interpreter work of every forward pass: each check written out (no helper call
        # for the common case), since, run after the kernels have swept the caches, each
        # function and object it touches costs a cache miss
        addresses = [0] * self.sequence.n_io
        held = []                                   # alive until the native call returns
        for node, io, (shape, dtype) in self.inputs:
            t = env[node]
            if t.__class__ in PLAIN_TENSORS and t.dtype is dtype and t.shape == shape \
                    and t.is_cpu and t.layout is torch.strided and t.is_contiguous():
                address = t.data_ptr()
                if address % t.itemsize == 0:
                    held.append(t)
                    addresses[io] = address
                    continue
            t = at_least_1d(t)
            fit = plain_read(t, shape, dtype)
            if fit is None:
                fit = fitted_read(self.where, node.name, t, shape, dtype)
            held.append(fit)
            addresses[io] = fit.data_ptr()
        for node, io in self.unread:
            addresses[io] = env[node].data_ptr()
        for prepack, reads, ios in self.prepacks:
            for io, t in zip(ios, prepack.packed([at_least_1d(env[n]) for n in reads])):
                held.append(t)
                addresses[io] = t.data_ptr()
        written = []
        for io, (shape, dtype), _ in self.outputs:
            t = torch.empty(shape, dtype=dtype)
            written.append(t)
            addresses[io] = t.data_ptr()
        if self.arena_nbytes:
            try:
                arena = self._arenas.take(self.arena_nbytes)
            except (MemoryError, ValueError) as exc:
                raise KernelRuntimeError(f"{self.where}: cannot allocate the {self.arena_nbytes} "
                                         f"bytes of their intermediate tensors and temporaries: "
                                         f"{exc}; free memory, or run a smaller batch") from None
            try:
                self.sequence(addresses, arena.address)
            finally:
                self._arenas.give(arena)
        else:
            self.sequence(addresses, 0)
        for t, (_, _, sinks) in zip(written, self.outputs):
            for node, scalar in sinks:
                env[node] = t.reshape(()) if scalar else t
        for view in self.views_after:
            view.run(env)


__all__ = ["KernelRun"]
