"""libgomp, the thread pool parallel kernels run on: found and loaded once per process.

Parallel kernels call ``GOMP_parallel`` and ``omp_get_{thread_num,num_threads}``; the library is
loaded with ``RTLD_GLOBAL`` so that native code (JIT-compiled or loaded from a shared library)
resolves them from the process.  It is loaded under the spin policy of :mod:`.threads`.

One OpenMP runtime per process: each runtime keeps its own pool of worker threads, which spin
after a parallel region, so two of them (PyTorch's and einloop's, say) compete for the cores.
Which library einloop loads, in order: the one another layer asked it to share
(:func:`share_runtime`, which :mod:`einloop.torch` calls with PyTorch's); else an OpenMP runtime
already in the process's global symbol scope (a library that loaded one with ``RTLD_GLOBAL``, as
PyTorch does, whatever its file is called); else the system's ``libgomp.so.1``.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
import warnings

from .threads import (GompRuntime, fallback_spin_count, forget_pool_after_fork,
                      spin_policy_for_loading)

_LIBGOMP_NAMES = ("libgomp.so.1",          # then Debian's multiarch folders of this machine
                  *(f"{d}/{os.uname().machine}-linux-gnu/libgomp.so.1"
                    for d in ("/lib", "/usr/lib") if hasattr(os, "uname")),
                  "libgomp.so", "libgomp.dylib")
#: what a parallel kernel calls; an OpenMP runtime that defines the first is one einloop can use
#: (LLVM's and Intel's define libgomp's entry points too)
RUNTIME_SYMBOLS = ("GOMP_parallel", "omp_get_num_threads", "omp_get_thread_num")
_gomp_state = None      # None: not tried; False: not found; else the GompRuntime loaded
_shared = None          # the file share_runtime asked for, until libgomp is loaded
_lock = threading.RLock()


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _dladdr():
    """glibc's ``dladdr`` (in libc since 2.34, in libdl before), or None."""
    for name in (None, "libdl.so.2"):
        try:
            fn = ctypes.CDLL(name).dladdr
        except (OSError, AttributeError, TypeError):     # TypeError: no CDLL(None) (Windows)
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        fn.restype = ctypes.c_int
        return fn
    return None


def library_file(function) -> str | None:
    """The file of the shared object that defines *function* (a ctypes function pointer),
    symbolic links resolved, or None where ``dladdr`` cannot tell."""
    dladdr = _dladdr()
    info = _DlInfo()
    address = ctypes.cast(function, ctypes.c_void_p).value
    if dladdr is None or not address or not dladdr(address, ctypes.byref(info)) \
            or not info.dli_fname:
        return None
    return os.path.realpath(os.fsdecode(info.dli_fname))


def runtime_of(library=None) -> str | None:
    """The file of the OpenMP runtime that *library* (the path of a shared object already
    loaded) binds ``GOMP_parallel`` to, searching it and its dependencies; None: the process's
    global symbol scope.  None if there is none."""
    mode = getattr(os, "RTLD_NOLOAD", 0) if library is not None else 0
    try:
        return library_file(getattr(ctypes.CDLL(library, mode=mode), RUNTIME_SYMBOLS[0]))
    except (OSError, AttributeError, TypeError):
        return None


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, TypeError):
        return False


def share_runtime(path) -> bool:
    """Run einloop's parallel loops on the OpenMP runtime at *path* (a library already loaded,
    another library's thread pool), so that the process has one pool.  True if they do (or
    will, when the first parallel kernel loads it); False if einloop loaded another runtime
    before (its kernels stay on that one: a kernel never mixes two runtimes) or found none.
    """
    global _shared
    with _lock:
        if _gomp_state is None:
            _shared = os.fspath(path)
            return True
        return bool(_gomp_state) and _same_file(_gomp_state.path, path)


def _candidates():
    """Library names to try: the usual sonames first, ``find_library`` (which may run
    ``ldconfig`` or a compiler) only when they all fail."""
    yield from _LIBGOMP_NAMES
    import ctypes.util                  # here: it imports subprocess, shutil, tempfile (~10 ms)
    found = ctypes.util.find_library("gomp")
    if found:
        yield found


def _load_gomp(spin_count):
    chosen = _shared or runtime_of()
    names = (chosen,) if chosen else ()
    with spin_policy_for_loading(names + _LIBGOMP_NAMES, spin_count) as runtime:
        for name in itertools.chain(names, _candidates()):
            try:
                lib = ctypes.CDLL(name, mode=getattr(os, "RTLD_GLOBAL", 0))
                entry = getattr(lib, RUNTIME_SYMBOLS[0])
            except (OSError, AttributeError):
                continue
            forget_pool_after_fork()
            return runtime(name, path=library_file(entry) or name)
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


def loaded_runtime() -> GompRuntime | None:
    """The runtime parallel loops run on if einloop has loaded one already (never loads)."""
    return _gomp_state or None


def gomp_available(spin_count=fallback_spin_count) -> bool:
    """Can parallel loops run on libgomp threads in this process?"""
    return gomp_runtime(spin_count) is not None
