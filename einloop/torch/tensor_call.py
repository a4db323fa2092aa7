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

    __slots__ = ("kernel", "_read_specs", "_write_specs", "_names")

    def __init__(self, kernel, tensors, n_written):
        specs = [(torch.Size(int(d) for d in t.shape), TORCH_DTYPES[t.dtype]) for t in tensors]
        self.kernel = kernel
        self._read_specs = tuple(specs[:len(specs) - n_written])
        self._write_specs = tuple(specs[len(specs) - n_written:])
        self._names = tuple(t.name for t in tensors)

    def __call__(self, reads) -> list:
        held, addresses = [], []
        if len(reads) == len(self._read_specs):
            for t, (shape, dtype) in zip(reads, self._read_specs):
                if t.__class__ not in PLAIN_TENSORS or t.dtype is not dtype or t.shape != shape \
                        or t.device.type != "cpu" or t.layout is not torch.strided:
                    break
                if not t.is_contiguous():
                    t = t.contiguous()
                address = t.data_ptr()
                if address % t.element_size():
                    break
                held.append(t)                      # alive until the kernel returns
                addresses.append(address)
        if len(held) < len(self._read_specs):
            held = self._fitted(reads)
            addresses = [t.data_ptr() for t in held]
        written = [torch.empty(shape, dtype=dtype) for shape, dtype in self._write_specs]
        addresses += [t.data_ptr() for t in written]
        self.kernel.call_addresses(addresses)
        return written

    def _fitted(self, reads) -> list:
        """*reads* checked one by one (an ``ArgumentError`` for the first that does not fit),
        each contiguous and aligned (a copy where it was not)."""
        where = f"kernel {self.kernel.name}"
        if len(reads) != len(self._read_specs):
            raise ArgumentError(f"{where} reads {len(self._read_specs)} tensors "
                                f"({', '.join(self._names[:len(self._read_specs)])}), "
                                f"got {len(reads)}")
        fitted = []
        for t, (shape, dtype), name in zip(reads, self._read_specs, self._names):
            if not isinstance(t, torch.Tensor):
                raise ArgumentError(f"{where}: {name} must be a torch tensor, got "
                                    f"{type(t).__name__}")
            if t.device.type != "cpu" or t.layout is not torch.strided:
                raise ArgumentError(f"{where}: {name} is a {t.layout} tensor on {t.device}; "
                                    "einloop's kernels read dense tensors on the CPU")
            if t.dtype is not dtype or t.shape != shape:
                raise ArgumentError(f"{where}: {name} must be {dtype} of shape "
                                    f"{tuple(shape)}, got {t.dtype} of shape {tuple(t.shape)}")
            t = t.detach().contiguous()
            if t.data_ptr() % t.element_size():
                t = t.clone()                       # torch allocates aligned memory
            fitted.append(t)
        return fitted


__all__ = ["PLAIN_TENSORS", "TensorCall"]
