"""OpenBLAS's threaded calls run on einloop's OpenMP thread pool: one pool in the process.

NumPy's and SciPy's wheels bundle OpenBLAS built with its own pthreads server.  After every
threaded call its workers spin for about 2^28 cycles (0.1 s; ``THREAD_TIMEOUT``) before they
sleep, so a kernel that runs right after a NumPy matmul shares a core with a spinning thread: a
parallel loop on two cores ran at 0.5-0.7x its speed alone, whatever its chunking.  The spin
is read from ``OPENBLAS_THREAD_TIMEOUT`` once, when NumPy loads OpenBLAS, long before einloop
can set anything.

OpenBLAS 0.3.28 and later let an application run its jobs on the application's threads
(``openblas_set_threads_callback_function``).  Once einloop has an OpenMP runtime for its
kernels, it installs a bridge (native code from :mod:`einloop.codegen.blas_bridge`, or the copy
every exported library with a parallel kernel carries) in each such OpenBLAS in the process:
OpenBLAS's jobs then run on the same libgomp team as einloop's loops, whose idle threads are
the ones the next kernel wants, and OpenBLAS's own workers sleep.  Only pthreads builds are
bridged (an OpenMP build runs on an OpenMP pool already); older OpenBLAS builds, MKL and other
BLAS libraries are left as they are.

Set ``EINLOOP_SHARE_BLAS_THREADS=0`` before the first parallel kernel to keep OpenBLAS on its
own threads.  In a forked child the bridge is removed again: libgomp's pool does not survive a
``fork``, OpenBLAS's own server restarts itself there.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
import os
import threading

#: the bridge's symbol, in the JIT and in exported libraries with a parallel kernel
BRIDGE_SYMBOL = "einloop__blas_bridge"
#: the bridge's count of calls (an i64 beside it)
CALLS_SYMBOL = "einloop__blas_bridge_calls"
#: set to 0 (or "no", "false", "off") to keep OpenBLAS on its own worker threads
OPT_OUT_VARIABLE = "EINLOOP_SHARE_BLAS_THREADS"
#: the names an OpenBLAS build may give its functions: plain, SciPy's wheels' ``scipy_``
#: prefix, and the ``64_``/``_64`` suffixes of builds with 64-bit integers
_PREFIXES = ("", "scipy_")
_SUFFIXES = ("", "64_", "_64")
_PTHREADS = 1           # openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP



@dataclass(frozen=True)
class BridgedBlas:
    """An OpenBLAS whose threaded calls einloop runs on its OpenMP pool."""
    path: str           # the library's file
    setter: str         # the function that installed the bridge


_lock = threading.Lock()
_bridge = None          # (address, owner): the bridge's code and what keeps it mapped
_bridged: dict = {}     # path -> BridgedBlas
_seen: set = set()      # paths looked at (bridged or not), so each is inspected once
_fork_hook = False


def sharing_enabled() -> bool:
    """False when the user set ``EINLOOP_SHARE_BLAS_THREADS`` to 0/no/false/off."""
    value = os.environ.get(OPT_OUT_VARIABLE, "").strip().lower()
    return value not in ("0", "no", "false", "off")


def _loaded_openblas() -> list:
    """Files of the OpenBLAS libraries mapped into this process (Linux: ``/proc/self/maps``;
    elsewhere none are found)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return []
    paths = []
    for line in maps.splitlines():
        if b"openblas" not in line:
            continue
        path = os.fsdecode(line.rsplit(b" ", 1)[-1])
        if path.startswith("/") and "openblas" in os.path.basename(path) \
                and path not in paths:
            paths.append(path)
    return paths


def _function(lib, stem):
    """``(name, function)`` of OpenBLAS's *stem* in *lib* under any build's naming, or None."""
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            name = f"{prefix}{stem}{suffix}"
            fn = getattr(lib, name, None)
            if fn is not None:
                return name, fn
    return None


def _bridge_one(path, address) -> BridgedBlas | None:
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:
        return None
    try:
        lib = ctypes.CDLL(path, mode=noload)
    except OSError:
        return None
    setter = _function(lib, "openblas_set_threads_callback_function")
    parallel = _function(lib, "openblas_get_parallel")
    if setter is None or parallel is None:
        return None             # before 0.3.28: no callback to install
    get_parallel = parallel[1]
    get_parallel.restype, get_parallel.argtypes = ctypes.c_int, []
    if get_parallel() != _PTHREADS:
        return None
    set_callback = setter[1]
    set_callback.restype, set_callback.argtypes = None, [ctypes.c_void_p]
    set_callback(address)
    return BridgedBlas(path, setter[0])


def _unbridge_in_child():
    """After ``fork``, in the child: hand every bridged OpenBLAS back its own threads (the
    parent's libgomp pool does not exist here)."""
    global _bridge
    for blas in list(_bridged.values()):
        try:
            lib = ctypes.CDLL(blas.path, mode=getattr(os, "RTLD_NOLOAD", 0))
            fn = getattr(lib, blas.setter)
            fn.restype, fn.argtypes = None, [ctypes.c_void_p]
            fn(None)
        except (OSError, AttributeError):
            pass
    _bridged.clear()
    _seen.clear()
    _bridge = None


def set_bridge(address: int, owner) -> None:
    """Offer the bridge at *address* (native code that stays mapped while *owner* lives; it is
    kept for the life of the process).  The first offer is used; later ones are ignored."""
    global _bridge
    with _lock:
        if _bridge is None and address:
            _bridge = (address, owner)


def share_blas_threads() -> list:
    """Bridge every OpenBLAS in the process not looked at before (call it when einloop's
    OpenMP runtime is in use and again when libraries may have been loaded since).  Returns the
    libraries bridged so far; none when no bridge was offered or the user opted out."""
    global _fork_hook
    if _bridge is None or not sharing_enabled():
        return list(_bridged.values())
    with _lock:
        for path in _loaded_openblas():
            if path in _seen:
                continue
            _seen.add(path)
            bridged = _bridge_one(path, _bridge[0])
            if bridged is not None:
                _bridged[path] = bridged
        if _bridged and not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_unbridge_in_child)
            _fork_hook = True
        return list(_bridged.values())


def bridged_blas() -> list:
    """The OpenBLAS libraries whose threaded calls run on einloop's pool now."""
    return list(_bridged.values())
