"""Helpers to build LoweredFuncs by hand for the codegen tests, and guarded arrays."""
import ctypes
import mmap

import numpy as np

from einloop.codegen import compile_func  # noqa: F401  (re-exported for the tests)

from einloop.ir.stmt import (Allocate, Buffer, For, ForKind, IfThenElse, LetStmt, Load,
                                      LoweredFunc, Scope, Seq, Store, seq)
from einloop.ir.expr import (BinOp, Binary, Call, Cast, CmpOp, Compare, Const, LogicOp, Select, Var,
                             const)

SERIAL, PAR, VEC = ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED


def arg(name, dtype, *shape):
    return Buffer(name, dtype, tuple(shape), Scope.ARG)


def temp(name, dtype, *shape):
    return Buffer(name, dtype, tuple(shape), Scope.TEMP)


def local(name, dtype, *shape):
    return Buffer(name, dtype, tuple(shape), Scope.LOCAL)


def ld(buf, index):
    return Load(buf, index if not isinstance(index, int) else const(index), buf.dtype)


def loop(var, extent, body, kind=SERIAL):
    return For(var, extent, kind, body)


def func(name, args, body, temps=(), outputs=None):
    attrs = {} if outputs is None else {"outputs": list(outputs)}
    return LoweredFunc(name, tuple(args), tuple(temps), body, attrs)


def call(name, *args):
    return Call(name, tuple(args), args[0].dtype)


def select(c, t, f):
    return Select(c, t, f, t.dtype)


def bmax(a, b):
    return Binary(BinOp.MAX, a, b, a.dtype)


def bmin(a, b):
    return Binary(BinOp.MIN, a, b, a.dtype)


_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_keep = []


def guarded(values, where="after"):
    """A copy of 1-D *values* placed right before (or after) an inaccessible page.

    Any read or write one element out of bounds on that side faults, so a test that passes
    proves that a guarded/masked access never touched memory it must not.
    """
    values = np.asarray(values)
    nbytes = values.nbytes
    pages = (nbytes + _PAGE - 1) // _PAGE + 2
    mm = mmap.mmap(-1, pages * _PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    guard = base if where == "before" else base + (pages - 1) * _PAGE
    _libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if _libc.mprotect(ctypes.c_void_p(guard), _PAGE, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = _PAGE if where == "before" else (pages - 1) * _PAGE - nbytes
    a = np.frombuffer(mm, dtype=values.dtype, count=values.size, offset=offset)
    a[:] = values
    _keep.append(mm)
    return a
