"""How long libgomp's idle workers spin: bounded by default, decided when libgomp is loaded.

After a parallel loop libgomp's idle workers spin before they sleep: ``GOMP_SPINCOUNT`` rounds,
300,000 by default (3 ms by libgomp's estimate, ~20 ms on CPUs whose ``pause`` is slow).  A
program that alternates einloop kernels with NumPy/OpenBLAS calls (whose threads also wait
actively) then has more busy threads than cores, and each call waits for a time slice: 40-50x
slower per pair.  libgomp reads ``GOMP_SPINCOUNT``/``OMP_WAIT_POLICY`` once, when it is loaded,
so unless the user set one of them einloop sets ``GOMP_SPINCOUNT=DEFAULT_SPIN_COUNT`` for the
moment of loading only (child processes and other programs do not inherit it).  1000 rounds last
10-80 us depending on the CPU: long enough to stay awake between back-to-back kernel calls,
short enough not to take a core from the next NumPy call.
"""
from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
import enum
import os
import warnings

from ..errors import EinloopWarning

DEFAULT_SPIN_COUNT = "1000"
SPIN_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


class SpinWarning(EinloopWarning):
    """libgomp was loaded before einloop with its long default spin, which einloop cannot bound."""


class SpinSource(enum.Enum):
    """Who decided how long libgomp's idle workers spin."""
    EINLOOP_DEFAULT = "einloop's default"
    ENVIRONMENT = "the environment"
    PRELOADED = "loaded before einloop"


@dataclass(frozen=True)
class GompRuntime:
    """The libgomp einloop runs parallel loops on, and the spin setting it read when loaded."""
    library: str
    setting: str         # e.g. "GOMP_SPINCOUNT=1000", or "libgomp's default" if unknown
    source: SpinSource


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
            f"many times slower. Start Python with GOMP_SPINCOUNT={DEFAULT_SPIN_COUNT} "
            "(einloop's default) or OMP_WAIT_POLICY=passive; GOMP_SPINCOUNT=300000 keeps "
            "libgomp's default and silences this warning", SpinWarning, stacklevel=5)
        return None, "libgomp's default", SpinSource.PRELOADED
    return (DEFAULT_SPIN_COUNT, f"GOMP_SPINCOUNT={DEFAULT_SPIN_COUNT}",
            SpinSource.EINLOOP_DEFAULT)


@contextlib.contextmanager
def spin_policy_for_loading(names):
    """Around the first load of libgomp (one of *names*): set einloop's default spin in the
    environment unless the user chose one, restore the environment after, and yield
    ``runtime(name)``, which describes the library *name* once it is loaded."""
    value, setting, source = _policy(_loaded_already(names))

    def runtime(name):
        return GompRuntime(name, setting, source)
    if value is None:
        yield runtime
        return
    os.environ["GOMP_SPINCOUNT"] = value
    try:
        yield runtime
    finally:
        del os.environ["GOMP_SPINCOUNT"]
