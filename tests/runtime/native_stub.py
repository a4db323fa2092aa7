"""A stand-in for compiled code: a ctypes callback with the einloop kernel ABI
``int32 f(void *A, void *B, void *T, int32 nthreads)`` (B = 2*A, T a temp), so that the runtime's
Kernel can be made and called without the compiler; and one with symbolic shapes, which also
takes the variables' values (``int64 n, int64 m``) before the thread count."""
import ctypes

import numpy as np

from einloop.runtime import BufferSpec, Kernel, Signature, VarSpec

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


# Symbolic shapes: ``int32 f(void *A, void *B, void *T, int64 var0, ..., int32 nthreads)``.
SYMBOLIC = Signature((BufferSpec("A", "float32", ("n", "m")),
                      BufferSpec("B", "float32", ("n", "m"))),
                     (BufferSpec("T", "float64", ("n", "m")),), ("B",),
                     (VarSpec("n", 1), VarSpec("m")))


class SymbolicStub:
    """B = 2*A through the temp T (T = A, then B = 2*T), over the elements of A's shape under
    the variables the kernel is passed; records what it saw per call: ``values``, ``nthreads``,
    the buffers' addresses and the bytes malloc holds at T (None without glibc)."""

    def __init__(self, signature=SYMBOLIC, status=0):
        self.signature, self.status, self.calls = signature, status, []
        n_vars = len(signature.vars)
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p, *([ctypes.c_int64] * n_vars), ctypes.c_int32)
        self.entry = proto(self._run)

    def _count(self, spec, values):
        env = {v.name: x for v, x in zip(self.signature.vars, values)}
        return int(np.prod([env.get(d, d) for d in spec.shape], dtype=np.int64))

    def _run(self, a, b, t, *rest):
        *values, nthreads = rest
        sig = self.signature
        count, t_count = self._count(sig.args[0], values), self._count(sig.temps[0], values)
        self.calls.append({"values": tuple(values), "nthreads": nthreads, "a": a, "b": b,
                           "t": t, "t_count": t_count})
        if count:
            src = np.frombuffer((ctypes.c_float * count).from_address(a), np.float32)
            dst = np.frombuffer((ctypes.c_float * count).from_address(b), np.float32)
            temp = np.frombuffer((ctypes.c_double * count).from_address(t), np.float64)
            temp[:] = src
            dst[:] = 2 * temp
        return self.status

    @property
    def address(self):
        return ctypes.cast(self.entry, ctypes.c_void_p).value


def symbolic_kernel(signature=SYMBOLIC, status=0, parallel=False, name="double"):
    stub = SymbolicStub(signature, status)
    return Kernel(name, signature, stub.address, stub, parallel=parallel)
