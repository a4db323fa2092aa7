"""The spin policy's one measurement that needs the compiler: how long a ``pause`` round lasts.

libgomp's idle workers spin ``GOMP_SPINCOUNT`` rounds of a loop around x86's ``pause`` (see
:mod:`einloop.runtime.threads` for why einloop bounds that to about ``SPIN_SECONDS``).  ``pause``
takes 3-140 cycles depending on the CPU, so the rounds are counted by JIT-compiling and timing a
``pause`` loop here; the runtime decides the policy with that count.
"""
from __future__ import annotations

import ctypes
import functools
import time


from ..runtime import threads as _rt
from .llvm import llvm_lock
from .target import Target, host_engine

_PAUSE_LOOP = """
declare void @llvm.x86.sse2.pause()
define void @pause_loop(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  call void @llvm.x86.sse2.pause()
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def _pause_seconds(rounds=4000, tries=3):
    """Seconds per round of a ``pause`` loop (libgomp's spin round on x86), or None on other
    CPUs.  The least of a few tries: a preempted try only lasts longer."""
    target = Target.parse("llvm")
    if not target.is_x86:
        return None
    with llvm_lock:
        engine = host_engine(_PAUSE_LOOP)
        loop = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address("pause_loop"))
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        loop(rounds)
        best = min(best, time.perf_counter() - start)
    return best / rounds


@functools.cache
def default_spin_count() -> int:
    """The ``GOMP_SPINCOUNT`` that makes libgomp's idle workers spin about SPIN_SECONDS here."""
    return _rt.spin_count_for(_pause_seconds())


def spin_policy_for_loading(names):
    """:func:`einloop.runtime.threads.spin_policy_for_loading` with the spin count timed here."""
    return _rt.spin_policy_for_loading(names, default_spin_count)
