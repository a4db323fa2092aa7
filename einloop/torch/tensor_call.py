"""A kernel run on torch tensors' memory, for the static signatures a custom op builds.

A kernel's own call (``Kernel.__call__``) takes NumPy arrays: a torch tensor goes through
``detach().contiguous().numpy()`` and then through the call's checks of type, dtype, shape,
flags and overlap.  That is a few microseconds per tensor, which a model pays on every kernel
of every layer and step (a convolution's forward and backward run six kernels), and more
once the kernels between have evicted the interpreter's code and data from the caches.

:class:`TensorCall` knows the shapes and dtypes of a kernel's arguments (its te tensors, all
static), checks each tensor read against them with a comparison of torch's own objects,
allocates the tensors written with ``torch.empty`` (so they cannot overlap anything) and hands
the kernel the raw addresses (``Kernel.call_addresses``).  A tensor that is not contiguous, or
not aligned to its element (a ``torch.frombuffer`` view), is copied first; one that does not fit
(another shape, dtype or device: a caller of the backward operator who passed the wrong
tensors) is an ``ArgumentError`` naming it, never memory read out of bounds.
"""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from .signature import TORCH_DTYPES


#: tensor types that behave as plain tensors, their memory their own (a Parameter has no
#: ``__torch_function__`` of its own; a subclass may hold its data elsewhere)
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


class TensorCall:
    """``call(reads) -> writes``: *kernel* run on the torch tensors *reads* (one per input
    argument, in order), writing new tensors (one per output argument).  *tensors* are the
    kernel's te arguments, inputs first, the last *n_written* written; all static."""

    __slots__ = ("kernel", "_read_specs", "write_specs", "_names")

    def __init__(self, kernel, tensors, n_written):
        specs = [(torch.Size(int(d) for d in t.shape), TORCH_DTYPES[t.dtype]) for t in tensors]
        self.kernel = kernel
        self._read_specs = tuple(specs[:len(specs) - n_written])
        self.write_specs = tuple(specs[len(specs) - n_written:])
        self._names = tuple(t.name for t in tensors)

    @property
    def read_specs(self) -> tuple:
        """``(torch.Size, torch.dtype)`` of each tensor the kernel reads, in order."""
        return self._read_specs

    def __call__(self, reads, extra=()) -> list:
        """The tensors written by the kernel run on *reads*; *extra*: tensors the kernel takes
        after them, checked by the caller (a :class:`~.prepack.Prepack`'s outputs)."""
        held = []
        if len(reads) == len(self._read_specs):
            for t, (shape, dtype) in zip(reads, self._read_specs):
                t = plain_read(t, shape, dtype)
                if t is None:
                    break
                held.append(t)
        if len(held) < len(self._read_specs):
            held = self._fitted(reads)
        written = [torch.empty(shape, dtype=dtype) for shape, dtype in self.write_specs]
        self.kernel.call_addresses([t.data_ptr() for t in held] + [t.data_ptr() for t in written]
                                   + [t.data_ptr() for t in extra])
        return written                              # *held* stayed alive until the kernel returned

    def _fitted(self, reads) -> list:
        """*reads* checked one by one (an ``ArgumentError`` for the first that does not fit),
        each contiguous and aligned (a copy where it was not)."""
        where = f"kernel {self.kernel.name}"
        if len(reads) != len(self._read_specs):
            raise ArgumentError(f"{where} reads {len(self._read_specs)} tensors "
                                f"({', '.join(self._names[:len(self._read_specs)])}), "
                                f"got {len(reads)}")
        return [fitted_read(where, name, t, shape, dtype)
                for t, (shape, dtype), name in zip(reads, self._read_specs, self._names)]


def at_least_1d(t):
    """*t*, or a 1-element view of it if it is 0-d: a kernel's arguments have one dimension or
    more (a graph's scalars are passed as such views)."""
    return t.reshape(1) if t.dim() == 0 else t


def plain_read(t, shape, dtype):
    """*t* as a kernel reads it, if it is a plain dense CPU tensor of *shape* and *dtype*: itself,
    or a contiguous copy; None if it is anything else (then :func:`fitted_read` says what)."""
    if t.__class__ not in PLAIN_TENSORS or t.dtype is not dtype or t.shape != shape \
            or not t.is_cpu or t.layout is not torch.strided:
        return None
    if not t.is_contiguous():
        t = t.contiguous()
    return None if t.data_ptr() % t.element_size() else t


def fitted_read(where, name, t, shape, dtype):
    """The tensor *t* (argument *name* of *where*) as a kernel reads it: detached, contiguous
    and aligned to its element (a copy where it was not); an ``ArgumentError`` saying what is
    wrong if it is not a dense CPU tensor of *shape* and *dtype*."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"{where}: {name} must be a torch tensor, got {type(t).__name__}")
    if t.device.type != "cpu" or t.layout is not torch.strided:
        raise ArgumentError(f"{where}: {name} is a {t.layout} tensor on {t.device}; "
                            "einloop's kernels read dense tensors on the CPU")
    if t.dtype is not dtype or t.shape != shape:
        raise ArgumentError(f"{where}: {name} must be {dtype} of shape {tuple(shape)}, got "
                            f"{t.dtype} of shape {tuple(t.shape)}")
    t = t.detach().contiguous()
    if t.data_ptr() % t.element_size():
        t = t.clone()                               # torch allocates aligned memory
    return t


__all__ = ["PLAIN_TENSORS", "TensorCall", "at_least_1d", "fitted_read", "plain_read"]
