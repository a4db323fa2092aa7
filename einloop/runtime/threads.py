"""How many threads a parallel kernel uses, and how long libgomp's idle workers spin.

After a parallel loop libgomp's idle workers spin before they sleep: ``GOMP_SPINCOUNT`` rounds of
a loop around x86's ``pause``, 300,000 by default.  ``pause`` takes 3-140 cycles depending on the
CPU, so that is 0.3-15 ms.  A program that alternates einloop kernels with NumPy/OpenBLAS calls
(whose threads also wait actively) then has more busy threads than cores, and each call waits
for a time slice: 20-50x slower per pair.  libgomp reads ``GOMP_SPINCOUNT``/``OMP_WAIT_POLICY``
once, when it is loaded, so unless the user set one of them einloop sets ``GOMP_SPINCOUNT`` to
the rounds that last ``SPIN_SECONDS`` for the moment of loading only (child processes and other
programs do not inherit it).  30 us is long enough to stay awake between back-to-back kernel
calls, and short enough not to take a core from the next NumPy call.

How long one ``pause`` round takes is measured by running one, which needs native code: the
caller passes that measurement in (``spin_count``); this module only decides the policy.
"""
from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
import enum
import functools
import os

from ..errors import ArgumentError

SPIN_SECONDS = 30e-6
FALLBACK_SPIN_COUNT = 1000      # where the spin round cannot be timed
SPIN_COUNT_RANGE = (100, 100_000)
SPIN_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")

_cpu_count = None
_thread_source = None   # follow_thread_count's function, or None
_pool_lost = False      # a forked child of a process whose libgomp had started threads

# Read on every parallel call (the variable may change while the process runs):
# ``os.environ.get`` of an unset name costs ~1 us (it raises and catches KeyError inside), a
# lookup in the mapping it wraps ~50 ns.  ``_data`` is that mapping (bytes keys on POSIX).
if isinstance(getattr(os.environ, "_data", None), dict):
    _getenv = os.environ._data.get
    _NUM_THREADS_KEY = os.environ.encodekey("EINLOOP_NUM_THREADS")
else:                                   # pragma: no cover  (another os.environ)
    _getenv = os.environ.get
    _NUM_THREADS_KEY = "EINLOOP_NUM_THREADS"


def follow_thread_count(source) -> None:
    """Make *source* (a function returning a thread count, or None to stop) decide the threads
    of parallel kernels when ``EINLOOP_NUM_THREADS`` is not set.

    For another library whose OpenMP pool einloop's kernels share (:mod:`einloop.torch` passes
    ``torch.get_num_threads``): libgomp keeps one pool per calling thread and resizes it to each
    region's team, ending surplus threads when a team is smaller than the last and starting new
    ones when it is larger, so two libraries that alternate teams of different sizes would start
    a thread per call, and the surplus threads of the larger team would spin beside the smaller
    team's work.  ``source()`` is called once per kernel call; a count below 1 is ignored.
    """
    global _thread_source
    if source is not None and not callable(source):
        raise ArgumentError(f"follow_thread_count: expected a function or None, got {source!r}")
    _thread_source = source


def default_num_threads() -> int:
    """``EINLOOP_NUM_THREADS`` if set, else the count of :func:`follow_thread_count`'s source if
    one is set, else the number of CPUs this process may run on."""
    global _cpu_count
    env = _getenv(_NUM_THREADS_KEY)
    if env is not None and not isinstance(env, str):
        env = os.fsdecode(env)
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ArgumentError(f"EINLOOP_NUM_THREADS must be a positive integer, got {env!r}")
        return n
    if _thread_source is not None:
        n = _thread_source()
        if n >= 1:
            return n
    if _cpu_count is None:
        try:
            _cpu_count = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            _cpu_count = os.cpu_count() or 1
    return _cpu_count


def team_threads(explicit=None) -> int:
    """The threads a parallel kernel's call runs on: *explicit* (a kernel's ``num_threads``)
    or :func:`default_num_threads`, and 1 in a forked child of a process that used its pool.

    libgomp's pool does not survive ``fork``: the child inherits the pool's bookkeeping but none
    of its threads, and its first parallel region waits for them forever.  So a forked child (a
    ``multiprocessing`` worker under the fork start method, a PyTorch DataLoader worker) runs
    einloop's kernels serially, as PyTorch runs its own ops there.
    """
    if _pool_lost:
        return 1
    return explicit or default_num_threads()


def forget_pool_after_fork() -> None:
    """Register (once the process has loaded libgomp) that a forked child has no pool."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_lose_pool)


def _lose_pool():
    global _pool_lost
    _pool_lost = True


class SpinSource(enum.Enum):
    """Who decided how long libgomp's idle workers spin."""
    EINLOOP_DEFAULT = "einloop's default"
    ENVIRONMENT = "the environment"
    PRELOADED = "loaded before einloop"


@dataclass(frozen=True)
class GompRuntime:
    """The libgomp einloop runs parallel loops on, and the spin setting it read when loaded."""
    library: str         # the name it was loaded by
    setting: str         # e.g. "GOMP_SPINCOUNT=400", or "libgomp's default" if unknown
    source: SpinSource
    path: str            # the file it was loaded from (symbolic links resolved, where known)


def spin_count_for(pause_seconds) -> int:
    """The ``GOMP_SPINCOUNT`` that spins about SPIN_SECONDS when one ``pause`` round lasts
    *pause_seconds* (None or 0: not measurable here, use FALLBACK_SPIN_COUNT)."""
    if not pause_seconds:
        return FALLBACK_SPIN_COUNT
    low, high = SPIN_COUNT_RANGE
    return max(low, min(high, round(SPIN_SECONDS / pause_seconds)))


def fallback_spin_count() -> int:
    """FALLBACK_SPIN_COUNT: the default where no ``pause`` round was timed."""
    return FALLBACK_SPIN_COUNT


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


def _policy(preloaded, spin_count):
    """``(GOMP_SPINCOUNT to set or None, setting, source)``: the user's choice wins, then a
    libgomp that is already loaded (its setting is fixed), then einloop's default.

    A libgomp already in the process (PyTorch ships one with the same soname) is used as it is:
    einloop's parallel loops and the other library's then share one thread pool, so its spin
    keeps the pool awake between the two libraries' regions instead of adding a second pool
    that competes for the cores, and einloop's guided chunks absorb what OpenBLAS's spinning
    workers take.  Its spin was fixed when it was loaded; nothing is left for the user to do.
    """
    user = [f"{k}={os.environ[k]}" for k in SPIN_VARIABLES if os.environ.get(k)]
    if user:
        return None, ", ".join(user), SpinSource.ENVIRONMENT
    if preloaded:
        return None, "libgomp's default", SpinSource.PRELOADED
    count = str(spin_count())
    return count, f"GOMP_SPINCOUNT={count}", SpinSource.EINLOOP_DEFAULT


@contextlib.contextmanager
def spin_policy_for_loading(names, spin_count=fallback_spin_count):
    """Around the first load of libgomp (one of *names*): set einloop's default spin in the
    environment unless the user chose one, restore the environment after, and yield
    ``runtime(name)``, which describes the library *name* once it is loaded.

    ``spin_count()`` gives einloop's default ``GOMP_SPINCOUNT`` (called only if it is needed).
    """
    value, setting, source = _policy(_loaded_already(names), spin_count)
    runtime = functools.partial(GompRuntime, setting=setting, source=source)
    if value is None:
        yield runtime
        return
    os.environ["GOMP_SPINCOUNT"] = value
    try:
        yield runtime
    finally:
        del os.environ["GOMP_SPINCOUNT"]
