"""Blocks of memory kept from one call to the next: where a kernel's temporaries and a model
partition's arena live.

A kernel that packs its weights or pads its input writes the copies to temporaries its caller
passes in, and a model's partition places its intermediate tensors in one arena.  Allocated
anew on every call, such a block of a few MiB is rarely taken from memory the process already
touches: glibc serves large blocks with a fresh ``mmap`` and trims the top of its heap when a
large block is freed, so each call's block comes back as new pages, each zeroed by the kernel
on its first touch, and the kernel that writes it first pays a page fault per 4 KiB inside its
timed work (the tuner times a kernel with its temporaries allocated once).  TVM's graph executor
and Inductor's generated wrappers keep such storage across calls for the same reason.

A :class:`WorkspacePool` keeps the blocks that calls gave back and hands them to the next call.
Calls that run at once (on several threads) each take a block of their own, so a block is never
shared by two running calls; the pool keeps at most :data:`MAX_FREE` blocks, and a block too
small for a call (a kernel with size variables called on larger sizes) is dropped for a larger
one.  A pool's memory is freed with the pool (its kernel), or at once by :meth:`clear`.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from .arena import ALIGNMENT

#: blocks a pool keeps for later calls: one per thread that calls the same kernel at once, for
#: the few threads a program runs kernels from
MAX_FREE = 4


class Workspace(NamedTuple):
    """A block of at least *nbytes* bytes at *address* (a multiple of :data:`ALIGNMENT`), owned
    by *array* (a NumPy byte array)."""
    array: np.ndarray
    address: int
    nbytes: int


def allocate_workspace(nbytes: int) -> Workspace:
    """A new block of *nbytes* bytes aligned to :data:`ALIGNMENT`.  Raises ``MemoryError`` (or
    ``ValueError`` for a size NumPy refuses) when it cannot be allocated."""
    array = np.empty(max(int(nbytes), 1) + ALIGNMENT, dtype=np.uint8)
    base = array.ctypes.data
    return Workspace(array, -(-base // ALIGNMENT) * ALIGNMENT, int(nbytes))


class WorkspacePool:
    """``take(nbytes)`` a block for a call, ``give(block)`` it back when the call returns."""

    def __init__(self):
        self._free = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> Workspace:
        """A block of at least *nbytes* bytes that no other call holds: one given back
        earlier if it is large enough, else a new one (see :func:`allocate_workspace`)."""
        with self._lock:
            block = self._free.pop() if self._free else None
        if block is not None and block.nbytes >= nbytes:
            return block
        return allocate_workspace(nbytes)

    def give(self, block: Workspace) -> None:
        """Give back a block :meth:`take` returned, once the call that used it has returned."""
        with self._lock:
            if len(self._free) < MAX_FREE:
                self._free.append(block)

    def clear(self) -> None:
        """Free the blocks kept for later calls (calls holding a block keep theirs)."""
        with self._lock:
            self._free.clear()

    @property
    def kept_bytes(self) -> int:
        """Bytes held for later calls."""
        with self._lock:
            return sum(b.nbytes for b in self._free)


__all__ = ["ALIGNMENT", "MAX_FREE", "Workspace", "WorkspacePool", "allocate_workspace"]
