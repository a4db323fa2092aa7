"""The process's LLVM: its one-time initialisation and the lock around its global context.

llvmlite works in LLVM's global context, which is not thread-safe: parsing, optimising,
printing, emitting and JIT-compiling modules, creating execution engines and loading libraries
into the JIT's symbol table all hold :data:`llvm_lock` (a re-entrant lock: one locked step may
call another).  This module imports nothing of einloop, so every part of codegen can take the
lock without importing the JIT.
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm

#: held around every use of LLVM's global context (see the module docstring)
llvm_lock = threading.RLock()

_init_lock = threading.RLock()
_initialised = False
_all_initialised = False


def init_llvm():
    """Initialise the native target once per process (llvmlite does the core itself)."""
    global _initialised
    with _init_lock:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            # LLVM 22's loop peeling asserts (aborting the process) when it peels the last
            # iteration of some loops, e.g. one selecting on ``i < 5`` and reading at
            # ``min(i - 2, 6)`` (tests/regressions/test_llvm_peeling.py); einloop's own passes
            # already split loops at such conditions, and turning it off measured no slower
            llvm.set_option("einloop", "-unroll-allow-peeling=false")
            _initialised = True


def init_all_targets():
    """Initialise every backend LLVM was built with, once, when a triple other than the
    process's is first asked for (cross-compiling, e.g. to aarch64-linux-gnu): most processes
    never need more than the native one."""
    global _all_initialised
    init_llvm()
    with _init_lock:
        if not _all_initialised:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _all_initialised = True
