"""A stand-in for compiled code: a ctypes callback with the einloop kernel ABI
``int32 f(void *A, void *B, void *T, int32 nthreads)`` (B = 2*A, T a temp), so that the runtime's
Kernel can be made and called without the compiler."""
import ctypes

import numpy as np

from einloop.runtime import BufferSpec, Kernel, Signature

N = 4
PROTO = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int32)
SIGNATURE = Signature((BufferSpec("A", "float32", (N,)), BufferSpec("B", "float32", (N,))),
                      (BufferSpec("T", "float64", (N,)),), ("B",))


class Stub:
    """The native entry point and what it saw: the owner a Kernel keeps alive."""

    def __init__(self, status=0):
        self.status, self.calls = status, []
        self.entry = PROTO(self._run)

    def _run(self, a, b, t, nthreads):
        self.calls.append((t, nthreads))
        floats = ctypes.c_float * N
        np.frombuffer(floats.from_address(b), np.float32)[:] = \
            2 * np.frombuffer(floats.from_address(a), np.float32)
        return self.status

    @property
    def address(self):
        return ctypes.cast(self.entry, ctypes.c_void_p).value


def stub_kernel(status=0, parallel=False):
    stub = Stub(status)
    return Kernel("double", SIGNATURE, stub.address, stub, parallel=parallel,
                  sources={"ir": "for i in range(4): B[i] = 2*A[i]"}, metadata={"target": "stub"})
