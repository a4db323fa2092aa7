"""A kernel's work on a model's weights, done once while the weights stay the same.

A tuned GEMM or convolution packs its weight into the layout its register tile reads.  When
the weight is a constant input of the kernel (a parameter or buffer of the model: what dynamo
marks as a static input), that pack is split off the kernel
(:func:`~einloop.schedule.passes.split_prologue.split_prologue`) into a prologue, and the
kernel reads the packed copy as an argument.  A :class:`Prepack` runs the prologue and keeps
its outputs; on each call it checks that every weight it read is still the same tensor (the
same object, the same memory) holding the same values (the same version counter, which every
in-place operation on a tensor increments: an optimizer's step, ``load_state_dict``,
``param.copy_()`` under ``torch.no_grad()``) and runs the prologue again only where one
changed.  So inference pays the pack once, and a training step pays it once per update, as
before.

One compiled graph can serve several sets of weights: dynamo compiles a module's class once
and passes each instance's parameters to the same graph, so two models of one class (an
ensemble, a teacher and its student) call the same kernels with their own weights.  A Prepack
therefore keeps one packed copy per set of weight objects (keyed by their identities), each
valid while those objects live and keep their memory and version; the copy of a set is freed
when one of its objects dies, so a Prepack holds at most one copy per live model.

A write through ``param.data`` is a change the version counter does not see (PyTorch documents
it: autograd does not see it either), and an inference tensor (a weight made or loaded under
``torch.inference_mode()``, as deployments do) has no version counter at all: an in-place
change of it under ``inference_mode`` is not seen either.  A model whose weights are changed
that way between calls is compiled with ``options={"prepack": False}``.
"""
from __future__ import annotations

import threading
import weakref

import torch

from ..errors import KernelRuntimeError
from .signature import TORCH_DTYPES
from .tensor_call import fitted_read


class Prepack:
    """The prologue *kernel* of a split kernel and its outputs for the current weights.

    ``packed(srcs)``: the prologue's outputs (tensors of ``specs``: ``(torch.Size,
    torch.dtype)`` each) for *srcs*, the kernel's inputs at positions *sources* (of
    ``source_specs``); computed again only when one of those changed (see the module
    docstring).  Safe to call from several threads at once.  The kernel itself does not
    read its inputs at positions *unread* (it reads their packed copies)."""

    __slots__ = ("kernel", "sources", "source_specs", "specs", "unread", "runs", "_states",
                 "_lock", "__weakref__")

    def __init__(self, kernel, sources, source_specs, specs, unread=()):
        self.kernel, self.sources, self.unread = kernel, tuple(sources), frozenset(unread)
        self.source_specs, self.specs = tuple(source_specs), tuple(specs)
        self.runs = 0                       # how often the prologue ran (for tests)
        # {ids of the source tensors: (per source (weakref, data_ptr, version), outputs)}
        self._states = {}
        self._lock = threading.Lock()

    @classmethod
    def of_split(cls, split, tensors) -> Prepack | None:
        """The Prepack of *split* (a :class:`~einloop.codegen.build.SplitKernel` of the kernel
        of te *tensors*), or None where it has no prologue."""
        if split.prologue is None:
            return None

        def spec(shape, dtype):
            return torch.Size(int(d) for d in shape), TORCH_DTYPES[dtype]
        return cls(split.prologue, split.sources,
                   [spec(tensors[p].shape, tensors[p].dtype) for p in split.sources],
                   [spec(b.shape, b.dtype) for b in split.main.signature.args[len(tensors):]],
                   split.unread)

    def packed(self, srcs) -> tuple:
        key = tuple(map(id, srcs))
        out = self._current(key, srcs)
        if out is not None:
            return out
        with self._lock:
            return self._repack(key, srcs)

    def _current(self, key, srcs):
        """The packed copy kept for *srcs* (their ids *key*), if they are still the tensors it
        was made of, at the same memory and version (compared by identity: ``==`` on tensors is
        elementwise; :func:`_version` written out, as this runs for every weight of every
        call)."""
        state = self._states.get(key)
        if state is None:
            return None
        for t, (ref, ptr, version) in zip(srcs, state[0]):
            if ref() is not t or t.data_ptr() != ptr or \
                    (None if t.is_inference() else t._version) != version:
                return None
        return state[1]

    def _repack(self, key, srcs) -> tuple:
        """Run the prologue on *srcs* (under the lock) and keep what it wrote."""
        out = self._current(key, srcs)              # another thread packed them meanwhile
        if out is not None:
            return out
        where = f"kernel {self.kernel.name}"
        held = [fitted_read(where, f"input {p}", t, shape, dtype) for p, t, (shape, dtype)
                in zip(self.sources, srcs, self.source_specs)]
        try:
            out = tuple(torch.empty(shape, dtype=dtype) for shape, dtype in self.specs)
        except RuntimeError as exc:         # torch's out-of-memory
            raise KernelRuntimeError(f"{where}: cannot allocate the packed copy of its "
                                     f"weights: {exc}") from None
        self.kernel.call_addresses([t.data_ptr() for t in held] + [t.data_ptr() for t in out])
        forget = _forgetter(weakref.ref(self), key)
        # replaced whole, so readers see one dict or the other; copies of dead weights are
        # dropped here too, in case a callback's removal raced with this copy
        states = {k: v for k, v in self._states.items()
                  if all(ref() is not None for ref, _, _ in v[0])}
        states[key] = (tuple((weakref.ref(t, forget), t.data_ptr(), _version(t))
                             for t in srcs), out)
        self._states = states
        self.runs += 1
        return out


def _forgetter(prepack_ref, key):
    """The weakref callback that frees the packed copy at *key* of the Prepack *prepack_ref*
    when one of its weights dies.  It runs wherever the collector does, maybe inside
    ``_repack`` on the same thread, so it takes no lock: it swaps in a dict without *key*."""
    def forget(_):
        prepack = prepack_ref()
        if prepack is not None and key in prepack._states:
            prepack._states = {k: v for k, v in prepack._states.items() if k != key}
    return forget


def _version(t):
    """*t*'s version counter; None for an inference tensor, which has none (see the module
    docstring)."""
    return None if t.is_inference() else t._version


__all__ = ["Prepack"]
