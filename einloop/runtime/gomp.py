"""libgomp, the thread pool parallel kernels run on: found and loaded once per process.

Parallel kernels call ``GOMP_parallel`` and ``omp_get_{thread_num,num_threads}``; the library is
loaded with ``RTLD_GLOBAL`` so that native code (JIT-compiled or loaded from a shared library)
resolves them from the process.  It is loaded under the spin policy of :mod:`.threads`.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings

from .threads import GompRuntime, spin_policy_for_loading, fallback_spin_count

_LIBGOMP_NAMES = ("libgomp.so.1",          # then Debian's multiarch folders of this machine
                  *(f"{d}/{os.uname().machine}-linux-gnu/libgomp.so.1"
                    for d in ("/lib", "/usr/lib") if hasattr(os, "uname")),
                  "libgomp.so", "libgomp.dylib")
_gomp_state = None      # None: not tried; False: not found; else the GompRuntime loaded
_lock = threading.RLock()


def _candidates():
    """Library names to try: the usual sonames first, ``find_library`` (which may run
    ``ldconfig`` or a compiler) only when they all fail."""
    yield from _LIBGOMP_NAMES
    import ctypes.util                  # here: it imports subprocess, shutil, tempfile (~10 ms)
    found = ctypes.util.find_library("gomp")
    if found:
        yield found


def _load_gomp(spin_count):
    with spin_policy_for_loading(_LIBGOMP_NAMES, spin_count) as runtime:
        for name in _candidates():
            try:
                ctypes.CDLL(name, mode=getattr(os, "RTLD_GLOBAL", 0))
            except OSError:
                continue
            return runtime(name)
    warnings.warn("einloop: libgomp (GNU OpenMP runtime) was not found; parallel loops will "
                  "run on one thread", RuntimeWarning, stacklevel=5)
    return False


def gomp_runtime(spin_count=fallback_spin_count) -> GompRuntime | None:
    """The libgomp parallel loops run on and the spin setting it read when loaded (loading it
    on first use, warning once if it cannot be found), or None.

    ``spin_count()`` gives einloop's default ``GOMP_SPINCOUNT``, asked for only when this call
    loads libgomp and neither the user nor an earlier load decided it.
    """
    global _gomp_state
    if _gomp_state is None:
        with _lock:
            if _gomp_state is None:
                _gomp_state = _load_gomp(spin_count)
    return _gomp_state or None


def gomp_available(spin_count=fallback_spin_count) -> bool:
    """Can parallel loops run on libgomp threads in this process?"""
    return gomp_runtime(spin_count) is not None
