"""LLVM types and small IR helpers shared by the emitters and the math library.

Everything here works on scalar and vector (``<N x T>``) values alike, so the code that builds
arithmetic never needs to know whether it is inside a vectorized loop.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..errors import BuildError

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

_SCALAR = {
    "bool": I1, "int8": I8, "uint8": I8, "int16": ir.IntType(16), "int32": I32, "int64": I64,
    "float16": F16, "float32": F32, "float64": F64,
    "bfloat16": F32,            # computed in float32 (see .bfloat16); 16 bits in memory
}
#: fast-math flags of every float operation: only FMA contraction, nothing value-changing.
FMF = ("contract",)


def scalar_type(dtype: str) -> ir.Type:
    try:
        return _SCALAR[dtype]
    except KeyError:
        raise BuildError(f"codegen: unsupported dtype {dtype!r}") from None


_MEMORY = {"bool": I8, "bfloat16": ir.IntType(16)}
_SIZES = {"bool": 1, "bfloat16": 2}


def mem_type(dtype: str) -> ir.Type:
    """Type of one element in memory: bool is a byte (NumPy's layout), bfloat16 its 16 bits
    (an i16: its register form is a float32), the rest as in registers."""
    t = _MEMORY.get(dtype)
    return scalar_type(dtype) if t is None else t


def elem_size(dtype: str) -> int:
    size = _SIZES.get(dtype)
    return int(np.dtype(dtype).itemsize) if size is None else size


def lanes_of(v) -> int | None:
    t = v.type
    return t.count if isinstance(t, ir.VectorType) else None


def elem_type(t: ir.Type) -> ir.Type:
    return t.element if isinstance(t, ir.VectorType) else t


def is_float_type(t: ir.Type) -> bool:
    return isinstance(elem_type(t), (ir.HalfType, ir.FloatType, ir.DoubleType))


def like(t: ir.Type, elem: ir.Type) -> ir.Type:
    """*elem*, as a vector with as many lanes as *t* has (or scalar if *t* is scalar)."""
    return ir.VectorType(elem, t.count) if isinstance(t, ir.VectorType) else elem


def const(t: ir.Type, value) -> ir.Constant:
    """A constant of (scalar or vector) type *t*, splatted over the lanes."""
    e = elem_type(t)
    if isinstance(e, (ir.HalfType, ir.FloatType, ir.DoubleType)):
        np_t = {ir.HalfType: np.float16, ir.FloatType: np.float32, ir.DoubleType: np.float64}
        value = float(np_t[type(e)](value))   # exactly representable: LLVM rejects inexact text
    elif e == I1:
        value = int(bool(value))
    else:
        value = int(value) & ((1 << e.width) - 1)
        if value >= 1 << (e.width - 1):
            value -= 1 << e.width
    c = ir.Constant(e, value)
    return SplatConstant(t, c) if isinstance(t, ir.VectorType) else c


class SplatConstant(ir.Constant):
    """A vector constant whose lanes are all one scalar constant, written the short way
    (``zeroinitializer``, ``undef``, ``splat (float 2.0)``) instead of lane by lane.

    LLVM parses both spellings to the same constant; the short one keeps the IR text of wide
    vectors small, which is what emitting, printing and parsing it cost.
    """

    def __init__(self, t: ir.VectorType, scalar: ir.Constant):
        super().__init__(t, [scalar] * t.count)

    def _get_reference(self):
        x = self.constant[0]
        if x.constant is ir.Undefined:
            return "undef"
        v = x.constant
        if v is not None and not isinstance(v, (bool, int, float)):
            return super()._get_reference()
        if v is None or (not v and math.copysign(1.0, v) > 0):   # 0, 0.0, False; not -0.0
            return "zeroinitializer"
        return f"splat ({x.type} {x.get_reference()})"


def const_vector(elem: ir.Type, values) -> ir.Constant:
    return ir.Constant(ir.VectorType(elem, len(values)), [const(elem, v) for v in values])


def splat(b: ir.IRBuilder, v, lanes: int, name=""):
    """Broadcast a scalar to ``<lanes x T>``."""
    if isinstance(v, ir.Constant) and not isinstance(v.type, ir.VectorType):
        return SplatConstant(ir.VectorType(v.type, lanes), v)
    vt = ir.VectorType(v.type, lanes)
    undef = SplatConstant(vt, ir.Constant(v.type, ir.Undefined))
    one = b.insert_element(undef, v, ir.Constant(I32, 0))
    zeros = SplatConstant(ir.VectorType(I32, lanes), ir.Constant(I32, 0))
    return b.shuffle_vector(one, undef, zeros, name=name)


def mangle(t: ir.Type) -> str:
    """The type suffix LLVM uses in overloaded intrinsic names (``v16f32``, ``i64``, ``p0``)."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{mangle(t.element)}"
    if isinstance(t, ir.PointerType):
        return "p0"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]


def declare(module: ir.Module, name: str, ret: ir.Type, args, attrs=()) -> ir.Function:
    """Declare (once) an external function or intrinsic in *module*."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name=name)
        for a in attrs:
            fn.attributes.add(a)
    return fn


def intrinsic(b: ir.IRBuilder, base: str, args, ret: ir.Type | None = None, name=""):
    """Call an overloaded LLVM intrinsic on (scalar or vector) operands of one type."""
    t = args[0].type
    fn = declare(b.module, f"{base}.{mangle(t)}", ret or t, [a.type for a in args])
    return b.call(fn, list(args), name=name)


def add_string_attr(fn: ir.Function, key: str, value: str):
    """Add a ``"key"="value"`` function attribute (llvmlite only validates bare keywords)."""
    set.add(fn.attributes, f'"{key}"="{value}"')


def alloca(b: ir.IRBuilder, typ, count=None, name="", align=None):
    """A stack slot, typed as an opaque ``ptr`` (llvmlite would print a typed pointer)."""
    a = b.alloca(typ, size=count, name=name)
    a.type = PTR
    if align:
        a.align = align
    return a
