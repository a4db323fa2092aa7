"""The callable users get back: argument checks, temp buffers, threads, sources, timing.

Calls go through ctypes, which releases the GIL for the duration of the kernel.  Everything
that can be decided once (expected dtypes and shapes, which arguments are written, the ctypes
prototype) is decided when the Kernel is made, to keep the per-call overhead small.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from ..errors import ArgumentError, BuildError
from .timing import Timing, time_callable  # noqa: F401  (Timing is re-exported)

SOURCE_FORMATS = ("llvm", "llvm-unopt", "asm", "ir")
_cpu_count = None


def default_num_threads() -> int:
    """``EINLOOP_NUM_THREADS`` if set, else the number of CPUs this process may run on."""
    global _cpu_count
    env = os.environ.get("EINLOOP_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ArgumentError(f"EINLOOP_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    if _cpu_count is None:
        try:
            _cpu_count = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            _cpu_count = os.cpu_count() or 1
    return _cpu_count


def _probe_data_offset():
    """Offset of the data pointer in NumPy's array object, if reading it there is verified."""
    probe = np.arange(4, dtype=np.int32)[1:]
    off = 2 * ctypes.sizeof(ctypes.c_void_p)       # PyObject_HEAD, then ``char *data``
    try:
        ok = ctypes.c_void_p.from_address(id(probe) + off).value == probe.ctypes.data
    except (ValueError, OverflowError):
        ok = False
    return off if ok else None


_DATA_OFFSET = _probe_data_offset()


def _data_ptr(a):
    """Address of *a*'s first element; ``a.ctypes.data`` costs ~4x more per call."""
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0


class _Param:
    __slots__ = ("pos", "name", "dtype", "shape", "written", "nbytes")

    def __init__(self, pos, buf, written):
        self.pos, self.name, self.written = pos, buf.name, written
        self.dtype = np.dtype(buf.dtype)
        self.shape = tuple(int(d) for d in buf.shape)
        self.nbytes = int(math.prod(self.shape)) * self.dtype.itemsize

    def describe(self):
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


class Kernel:
    """A compiled kernel: ``kernel(*arrays)`` runs it on C-contiguous NumPy arrays in place."""

    def __init__(self, func, compiled):
        self.func = func
        self.name = func.name
        self._compiled = compiled
        outputs = func.attrs.get("outputs")
        if outputs is None:
            outputs = [func.args[-1].name] if func.args else []
        outputs = set(outputs)
        self._params = tuple(_Param(i, b, b.name in outputs) for i, b in enumerate(func.args))
        self._written = tuple(p for p in self._params if p.written)
        self._temps = tuple((int(math.prod(t.shape)), np.dtype(t.dtype)) for t in func.temps)
        self._parallel = compiled.parallel
        n = len(func.args) + len(func.temps)
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n), ctypes.c_int32)
        self._cfunc = proto(compiled.address)
        self._num_threads = None

    # threads ---------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        """Threads for parallel loops: set per kernel, else ``EINLOOP_NUM_THREADS``/CPU count."""
        return self._num_threads if self._num_threads is not None else default_num_threads()

    @num_threads.setter
    def num_threads(self, n):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ArgumentError(f"num_threads must be a positive int or None, got {n!r}")
        self._num_threads = n

    # calling ---------------------------------------------------------------------------------
    def __call__(self, *arrays):
        ptrs = self._check(arrays)
        temps = [np.empty(n, dtype=dt) for n, dt in self._temps]
        threads = self.num_threads if self._parallel else 1
        self._cfunc(*ptrs, *[_data_ptr(t) for t in temps], threads)

    def _check(self, arrays):
        """Validate the arguments; return their data pointers."""
        params = self._params
        if len(arrays) != len(params):
            sig = ", ".join(f"{p.name}: {p.describe()}" for p in params)
            raise ArgumentError(f"kernel {self.name} takes {len(params)} arrays ({sig}), "
                                f"got {len(arrays)}")
        ptrs = []
        for p, a in zip(params, arrays):
            if (not isinstance(a, np.ndarray) or (a.dtype is not p.dtype and a.dtype != p.dtype)
                    or a.shape != p.shape or not a.flags.c_contiguous
                    or (p.written and not a.flags.writeable)):
                self._explain(p, a)
            ptrs.append(_data_ptr(a))
        for p in self._written:
            # contiguous arrays of known size: overlap is a comparison of byte ranges
            lo, hi = ptrs[p.pos], ptrs[p.pos] + p.nbytes
            for q in params:
                if q is not p and ptrs[q.pos] < hi and lo < ptrs[q.pos] + q.nbytes:
                    raise ArgumentError(f"{self._where(p)}: the kernel writes this array but it "
                                        f"shares memory with argument {q.pos} ({q.name}); pass "
                                        "a separate output array")
        return ptrs

    def _where(self, p):
        return f"kernel {self.name}: argument {p.pos} ({p.name})"

    def _explain(self, p, a):
        where = self._where(p)
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"{where}: expected a numpy.ndarray of {p.describe()}, got "
                                f"{type(a).__name__}")
        if a.dtype != p.dtype:
            raise ArgumentError(f"{where}: expected dtype {p.dtype.name}, got {a.dtype.name} "
                                f"(convert with .astype(np.{p.dtype.name}))")
        if a.shape != p.shape:
            raise ArgumentError(f"{where}: expected shape {p.shape}, got {a.shape}")
        if not a.flags.c_contiguous:
            raise ArgumentError(f"{where}: the array is not C-contiguous (a transposed or "
                                "strided view?); pass np.ascontiguousarray(...) instead")
        if p.written and not a.flags.writeable:
            raise ArgumentError(f"{where}: the kernel writes this array but it is read-only")

    # sources and timing ----------------------------------------------------------------------
    def get_source(self, fmt="llvm") -> str:
        """The kernel as ``llvm`` (optimised IR), ``llvm-unopt``, ``asm`` or ``ir`` (loop IR)."""
        c = self._compiled
        if fmt == "llvm":
            return c.opt_ir
        if fmt == "llvm-unopt":
            return c.unopt_ir
        if fmt == "asm":
            return c.asm()
        if fmt == "ir":
            return str(self.func)
        raise BuildError(f"unknown source format {fmt!r}; valid formats: "
                         f"{', '.join(repr(f) for f in SOURCE_FORMATS)}")

    def time(self, *arrays, number=1, repeat=3, min_repeat_ms=0, warmup=1) -> Timing:
        """Time the kernel on *arrays*: ``repeat`` measurements of ``number`` calls each.

        With ``min_repeat_ms``, ``number`` grows until one measurement lasts that long.
        Argument checks and temp allocation happen once, outside the measured calls.
        """
        ptrs = self._check(arrays)
        temps = [np.empty(n, dtype=dt) for n, dt in self._temps]
        args = (*ptrs, *[_data_ptr(t) for t in temps], self.num_threads if self._parallel else 1)
        f = self._cfunc
        return time_callable(lambda: f(*args), number, repeat, min_repeat_ms, warmup)

    def __repr__(self):
        sig = ", ".join(f"{p.name}: {p.describe()}" for p in self._params)
        return f"<einloop.Kernel {self.name}({sig})>"
