"""Evicting arrays from the CPU caches: what a cold-cache measurement does before each call.

A kernel timed back to back finds its arguments in cache; inside a model, the other layers have
evicted them (a network's weights are larger than any last-level cache), so the schedules that
stream memory best are not the ones that win back to back.  TVM's runners flush a kernel's
arguments before each timed call (``enable_cpu_cache_flush``) for that reason.

On x86, ``clflush`` of every cache line of each array (JIT-compiled once per process) evicts
them from every level, and an ``mfence`` waits for it; elsewhere, writing a scratch buffer of
twice :data:`FALLBACK_CACHE_BYTES` evicts them, as a model's other layers would.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .llvm import llvm_lock
from .target import Target, host_engine

#: bytes the portable fallback writes (twice) to push arrays out of the last-level cache where
#: ``clflush`` is not available: larger than the last-level cache slice of one core on current
#: AArch64 and x86 server parts
FALLBACK_CACHE_BYTES = 64 * 1024 * 1024
#: a cache line on every x86-64 CPU
LINE_BYTES = 64

_SYMBOL = "einloop_evict"
_IR = f"""
declare void @llvm.x86.sse2.clflush(ptr)
declare void @llvm.x86.sse2.mfence()

define void @{_SYMBOL}(ptr %p, i64 %nbytes) {{
entry:
  %any = icmp sgt i64 %nbytes, 0
  br i1 %any, label %loop, label %done
loop:
  %off = phi i64 [0, %entry], [%next, %loop]
  %line = getelementptr i8, ptr %p, i64 %off
  call void @llvm.x86.sse2.clflush(ptr %line)
  %next = add i64 %off, {LINE_BYTES}
  %more = icmp slt i64 %next, %nbytes
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.sse2.mfence()
  ret void
}}
"""

_engine = None
_evict = None
_scratch = None
_x86 = None


def _clflush():
    """The JIT-compiled ``evict(ptr, nbytes)`` for this x86 host (compiled on first use)."""
    global _engine, _evict
    if _evict is None:
        with llvm_lock:
            if _evict is None:
                _engine = host_engine(_IR)
                _evict = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
                    _engine.get_function_address(_SYMBOL))
    return _evict


def evict(arrays) -> None:
    """Push the memory of the NumPy *arrays* out of the CPU caches."""
    global _scratch, _x86
    if _x86 is None:
        _x86 = Target.parse("llvm").is_x86
    if _x86:
        fn = _clflush()
        for a in arrays:
            fn(a.ctypes.data, a.nbytes)
        return
    if _scratch is None:
        _scratch = np.empty(2 * FALLBACK_CACHE_BYTES, np.uint8)
    _scratch.fill(1)


__all__ = ["evict"]
