"""LLVM code generation: a lowered loop-IR function -> a JIT-compiled native :class:`Kernel`.

``compile_func(func, target="llvm")`` is the entry point; see :mod:`.emit` for the generated
code's shape, :mod:`.vector` and :mod:`.parallel` for SIMD and multi-threaded loops.  What runs
the result (the Kernel, its checks and timing) is :mod:`einloop.runtime`.
"""
from .jit import clear_cache, compile_func
from .target import Target

__all__ = ["compile_func", "Target", "clear_cache"]
