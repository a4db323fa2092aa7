"""LLVM code generation: a lowered loop-IR function -> a JIT-compiled native :class:`Kernel`.

``compile_func(func, target="llvm")`` is the entry point; see :mod:`.emit` for the generated
code's shape, :mod:`.vector` and :mod:`.parallel` for SIMD and multi-threaded loops.  Compiling
is :mod:`.jit` (O3 and MCJIT, with :mod:`.cache` keeping object code across processes);
:mod:`.shipped` compiles the same object code in one process for another to load (the tuner's
builders and runner); :mod:`.export` writes libraries; :mod:`.llvm` holds the lock every use of
LLVM's global context takes.  What runs the result (the Kernel, its checks and timing) is
:mod:`einloop.runtime`.
"""
from .jit import clear_cache, compile_func
from .target import Target
from . import intrinsics  # noqa: F401  (registers einloop's tensor intrinsics by name)
from . import amx  # noqa: F401  (and its AMX ones)

__all__ = ["compile_func", "Target", "clear_cache"]
