"""How long libgomp's idle workers spin: about 30 us by default, decided when libgomp is loaded.

After a parallel loop libgomp's idle workers spin before they sleep: ``GOMP_SPINCOUNT`` rounds of
a loop around x86's ``pause``, 300,000 by default.  ``pause`` takes 3-140 cycles depending on the
CPU, so that is 0.3-15 ms.  A program that alternates einloop kernels with NumPy/OpenBLAS calls
(whose threads also wait actively) then has more busy threads than cores, and each call waits
for a time slice: 20-50x slower per pair.  libgomp reads ``GOMP_SPINCOUNT``/``OMP_WAIT_POLICY``
once, when it is loaded, so unless the user set one of them einloop times a ``pause`` loop and
sets ``GOMP_SPINCOUNT`` to the rounds that last ``SPIN_SECONDS`` for the moment of loading only
(child processes and other programs do not inherit it).  30 us is long enough to stay awake
between back-to-back kernel calls, and short enough not to take a core from the next NumPy call.
"""
from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
import enum
import functools
import os
import time
import warnings

import llvmlite.binding as llvm

from ..errors import SpinWarning
from .target import Target

SPIN_SECONDS = 30e-6
FALLBACK_SPIN_COUNT = 1000      # where the spin round cannot be timed
SPIN_COUNT_RANGE = (100, 100_000)
SPIN_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
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


class SpinSource(enum.Enum):
    """Who decided how long libgomp's idle workers spin."""
    EINLOOP_DEFAULT = "einloop's default"
    ENVIRONMENT = "the environment"
    PRELOADED = "loaded before einloop"


@dataclass(frozen=True)
class GompRuntime:
    """The libgomp einloop runs parallel loops on, and the spin setting it read when loaded."""
    library: str
    setting: str         # e.g. "GOMP_SPINCOUNT=400", or "libgomp's default" if unknown
    source: SpinSource


def _pause_seconds(rounds=4000, tries=3):
    """Seconds per round of a ``pause`` loop (libgomp's spin round on x86), or None on other
    CPUs.  The least of a few tries: a preempted try only lasts longer."""
    target = Target.parse("llvm")
    if not target.triple.startswith(("x86_64", "i686", "i386")):
        return None
    from .jit import _lock          # LLVM's global context is not thread-safe
    with _lock:
        mod = llvm.parse_assembly(_PAUSE_LOOP)
        mod.triple = target.triple
        engine = llvm.create_mcjit_compiler(mod, target.new_target_machine())
        engine.finalize_object()
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
    per_round = _pause_seconds()
    if not per_round:
        return FALLBACK_SPIN_COUNT
    low, high = SPIN_COUNT_RANGE
    return max(low, min(high, round(SPIN_SECONDS / per_round)))


def _loaded_already(names) -> bool:
    """Is one of *names* already in the process (loaded by another library, or by the user)?"""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:
        return False
    for name in names:
        try:
            ctypes.CDLL(name, mode=noload)
        except OSError:
            continue
        return True
    return False


def _policy(preloaded):
    """``(GOMP_SPINCOUNT to set or None, setting, source)``: the user's choice wins, then a
    libgomp that is already loaded (its setting is fixed), then einloop's default."""
    user = [f"{k}={os.environ[k]}" for k in SPIN_VARIABLES if os.environ.get(k)]
    if user:
        return None, ", ".join(user), SpinSource.ENVIRONMENT
    if preloaded:
        warnings.warn(
            "einloop: libgomp was loaded by another library before einloop, with GOMP_SPINCOUNT "
            "and OMP_WAIT_POLICY unset, so its idle threads spin for milliseconds after each "
            "parallel loop and alternating einloop kernels with NumPy/OpenBLAS calls may run "
            f"many times slower. Start Python with GOMP_SPINCOUNT={default_spin_count()} "
            "(einloop's default) or OMP_WAIT_POLICY=passive; GOMP_SPINCOUNT=300000 keeps "
            "libgomp's default and silences this warning", SpinWarning, stacklevel=5)
        return None, "libgomp's default", SpinSource.PRELOADED
    count = str(default_spin_count())
    return count, f"GOMP_SPINCOUNT={count}", SpinSource.EINLOOP_DEFAULT


@contextlib.contextmanager
def spin_policy_for_loading(names):
    """Around the first load of libgomp (one of *names*): set einloop's default spin in the
    environment unless the user chose one, restore the environment after, and yield
    ``runtime(name)``, which describes the library *name* once it is loaded."""
    value, setting, source = _policy(_loaded_already(names))
    runtime = functools.partial(GompRuntime, setting=setting, source=source)
    if value is None:
        yield runtime
        return
    os.environ["GOMP_SPINCOUNT"] = value
    try:
        yield runtime
    finally:
        del os.environ["GOMP_SPINCOUNT"]
