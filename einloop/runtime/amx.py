"""The Linux permission to use AMX tiles, asked once per process.

AMX's tile data is a large piece of register state (8 KiB) that Linux does not save and
restore for a process unless the process asks for it first: ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``.  A thread that runs a tile instruction before the request dies of SIGILL.
The permission belongs to the whole process (threads started later, such as the OpenMP team's
workers, have it too); each thread's tile configuration (``ldtilecfg``) is its own, and the
compiled code loads it in every function that uses tiles.

:func:`request` makes the request once (thread-safe) and says why AMX cannot run, or None when
it can; einloop calls it when it loads a kernel whose code uses AMX (built, loaded from the
compile cache, from a tuning worker or from an exported library), and refuses the kernel with
the reason.  No other einloop code touches AMX state.
"""
from __future__ import annotations

import ctypes
import sys
import threading

from . import cpu

_SYS_ARCH_PRCTL = 158            # x86-64 Linux
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
#: the /proc/cpuinfo flags of the AMX units
FLAGS = {"amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16"}

_lock = threading.Lock()
_answer: list = []               # [None or the reason], once asked


def request() -> str | None:
    """Ask Linux, once per process, for the AMX tile state; None when AMX code may run, else
    a sentence saying why not (not x86-64 Linux, a CPU without AMX, a kernel that refuses)."""
    with _lock:
        if not _answer:
            _answer.append(_ask())
        return _answer[0]


def missing_units(features) -> tuple:
    """Of the AMX *features* (LLVM names), those this CPU is known to lack."""
    flags = cpu.host_flags()
    if flags is None:
        return ()
    return tuple(f for f in features if f in FLAGS and FLAGS[f] not in flags)


def _ask():
    if not sys.platform.startswith("linux") or cpu.host_arch() != "x86_64":
        return (f"AMX needs x86-64 Linux (its permission request is Linux's), this is "
                f"{sys.platform} on {cpu.host_arch()}")
    flags = cpu.host_flags()
    if flags is not None and "amx_tile" not in flags:
        return "this CPU has no AMX tile unit (no amx_tile in /proc/cpuinfo)"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError) as exc:
        return f"the C library's syscall() cannot be reached ({exc})"
    syscall.restype = ctypes.c_long
    got = syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                  ctypes.c_ulong(_XFEATURE_XTILEDATA))
    if got != 0:
        err = ctypes.get_errno()
        return (f"Linux refused the AMX permission (arch_prctl(ARCH_REQ_XCOMP_PERM, "
                f"XFEATURE_XTILEDATA) failed with errno {err}: a kernel older than 5.16, or "
                "AMX disabled)")
    return None
