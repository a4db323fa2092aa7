"""Code for external stages (``te.extern``): the call, and binding the function's address.

:func:`emit_call` declares the C function in the kernel's module (``void f(ptr..., i64...)``,
see :mod:`einloop.te.extern`) and calls it with the buffers' pointers and the extents.
:func:`bind` loads each function's library (:mod:`einloop.runtime.externs`) and hands its
address to the JIT's symbol table under the function's name, just before a kernel is linked or
its object code loaded: that kernel calls the function of the library it names.
"""
from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import BuildError, InternalError
from ..ir import stmt as L
from ..ir.visit import walk_stmt
from ..runtime import externs
from .irtypes import I64, PTR, VOID
from .llvm import llvm_lock


def externs_of(func: L.LoweredFunc) -> tuple:
    """The ``(symbol, library)`` of every external function *func* calls, each once."""
    return tuple(dict.fromkeys((s.symbol, s.library) for s in walk_stmt(func.body)
                               if isinstance(s, L.ExternCall)))


def bind(pairs, name: str):
    """Load the libraries of *pairs* (``(symbol, library)``) and register each function for the
    JIT; BuildError naming kernel *name* when a library or a symbol is missing, or when one
    symbol is asked of two libraries (the kernel's code names a function by its symbol alone)."""
    libraries = {}
    for symbol, library in pairs:
        other = libraries.setdefault(symbol, library)
        if other != library:
            raise BuildError(f"kernel {name} calls the external function {symbol} of two "
                             f"libraries ({other or 'the process'} and {library or 'the process'})"
                             "; one kernel can call one function of a name: rename one, or build "
                             "separate kernels")
    for symbol, library in pairs:
        address = externs.resolve(symbol, library, BuildError, f"kernel {name}")
        with llvm_lock:
            llvm.add_symbol(symbol, address)


def emit_call(em, s: L.ExternCall):
    """Emit ``symbol(inputs..., output, extents...)`` at *em*'s builder (root level code)."""
    if em.vec is not None or em.in_parallel:
        raise InternalError(f"codegen: the external call {s.symbol} is inside a vector or "
                            "parallel loop; external stages run at the root")
    buffers = s.inputs + (s.output,)
    fnty = ir.FunctionType(VOID, [PTR] * len(buffers) + [I64] * len(s.extents))
    fn = em.k.module.globals.get(s.symbol)
    if fn is None:
        fn = ir.Function(em.k.module, fnty, name=s.symbol)
    elif not isinstance(fn, ir.Function) or fn.function_type != fnty:
        raise BuildError(f"kernel {em.k.func.name}: the external function {s.symbol} clashes "
                         "with another function of that name the kernel uses (a math or "
                         "runtime function, or the same function called with other arguments); "
                         "give the C function another name")
    args = [em.buffer_ptr(b) for b in buffers] + [em.expr(e) for e in s.extents]
    em.b.call(fn, args)
