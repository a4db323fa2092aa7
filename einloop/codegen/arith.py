"""Arithmetic, comparisons and casts on scalar or vector LLVM values of one einloop dtype.

Pure builder functions, no emitter state: they only decide which LLVM instruction implements an
einloop operator for a dtype (signedness, floor vs truncating division, NaN-aware comparisons).

``max``/``min`` are LLVM intrinsics, not ``select(x > y, x, y)``: the select uses each operand
twice, and a long chain of them (an unrolled max reduction whose value does not depend on the
vectorized loop) makes LLVM 22's loop vectorizer walk the chain's paths, exponentially many
(``vputils::isSingleScalar``), so O3 never finishes.  Float max/min propagate NaN, as NumPy's
``maximum``, ``max`` and ``min`` do (``llvm.maximum``/``llvm.minimum``).
"""
from __future__ import annotations

from llvmlite import ir

from ..errors import BuildError
from ..ir import dtypes
from ..ir.expr import BinOp, CmpOp, LogicOp
from . import bfloat16
from .irtypes import F32, FMF, I1, I32, I64, const, elem_type, intrinsic, like, scalar_type

_UNSIGNED = ("uint8", "bool")
_DIVMOD = frozenset((BinOp.FLOORDIV, BinOp.MOD, BinOp.TDIV, BinOp.TMOD))
_FLOAT_BITS = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}


def const_int(v):
    """The Python int of an integer constant (scalar, or a vector splat), else None."""
    if not isinstance(v, ir.Constant):
        return None
    c = v.constant
    if isinstance(c, list):
        vals = {getattr(x, "constant", None) for x in c}
        return vals.pop() if len(vals) == 1 and isinstance(next(iter(vals), None), int) else None
    return c if isinstance(c, int) else None


def binary(b: ir.IRBuilder, op: BinOp, x, y, dtype: str):
    if dtype == dtypes.BFLOAT16:
        r = _float_binary(b, op, x, y, dtype)      # in float32, the register type
        exact = op is BinOp.MAX or op is BinOp.MIN  # one of the operands (or a quiet NaN)
        return r if exact else bfloat16.round_value(b, r)
    if dtypes.is_float(dtype):
        return _float_binary(b, op, x, y, dtype)
    if dtype == dtypes.BOOL:
        raise BuildError(f"arithmetic '{op}' on bool values; cast them first")
    return _int_binary(b, op, x, y, dtype)


def _float_binary(b, op, x, y, dtype):
    if op is BinOp.ADD:
        return b.fadd(x, y, flags=FMF)
    if op is BinOp.SUB:
        return b.fsub(x, y, flags=FMF)
    if op is BinOp.MUL:
        return b.fmul(x, y, flags=FMF)
    if op is BinOp.DIV:
        return b.fdiv(x, y, flags=FMF)
    if op is BinOp.MAX or op is BinOp.MIN:
        return intrinsic(b, "llvm.maximum" if op is BinOp.MAX else "llvm.minimum", [x, y])
    raise BuildError(f"operator '{op}' is not defined on {dtype} values")


def _int_binary(b, op, x, y, dtype):
    # no nsw/nuw: integer arithmetic wraps (as in NumPy), and a wrapped nsw result would be poison
    signed = dtype not in _UNSIGNED
    if op is BinOp.ADD:
        return b.add(x, y)
    if op is BinOp.SUB:
        return b.sub(x, y)
    if op is BinOp.MUL:
        return b.mul(x, y)
    if op is BinOp.MAX or op is BinOp.MIN:
        return intrinsic(b, f"llvm.{'s' if signed else 'u'}{op.symbol}", [x, y])
    if op in _DIVMOD:
        want_mod = op is BinOp.MOD or op is BinOp.TMOD
        if not signed:
            return _udivmod(b, x, y, want_mod)
        if op is BinOp.TDIV or op is BinOp.TMOD:
            return _sdivmod_trunc(b, x, y, want_mod)
        return _floor_divmod(b, x, y, want_mod)
    raise BuildError(f"operator '{op}' is not defined on {dtype} values; use '//' for integer "
                     "division")


def _safe_divisor(b, y, signed):
    """For a non-constant divisor, replace 0 (and -1, whose INT_MIN quotient traps on x86) by 1.

    Returns ``(divisor, is_zero, is_minus_one)``; the flags are None for constant divisors.
    NumPy's convention ``x // 0 == x % 0 == 0`` is applied by the callers.
    """
    k = const_int(y)
    if k is not None and k != 0 and not (signed and k == -1):
        return y, None, None
    zero = b.icmp_signed("==", y, const(y.type, 0))
    minus1 = b.icmp_signed("==", y, const(y.type, -1)) if signed else None
    bad = zero if minus1 is None else b.or_(zero, minus1)
    return b.select(bad, const(y.type, 1), y), zero, minus1


def _fix_special(b, x, q, want_mod, zero, minus1):
    if minus1 is not None:
        q = b.select(minus1, const(x.type, 0) if want_mod else b.sub(const(x.type, 0), x), q)
    if zero is not None:
        q = b.select(zero, const(x.type, 0), q)
    return q


def _udivmod(b, x, y, want_mod):
    d, zero, _ = _safe_divisor(b, y, False)
    r = b.urem(x, d) if want_mod else b.udiv(x, d)
    return _fix_special(b, x, r, want_mod, zero, None)


def _sdivmod_trunc(b, x, y, want_mod):
    d, zero, minus1 = _safe_divisor(b, y, True)
    r = b.srem(x, d) if want_mod else b.sdiv(x, d)
    return _fix_special(b, x, r, want_mod, zero, minus1)


def _floor_divmod(b, x, y, want_mod):
    """Python semantics: the quotient rounds toward -inf, the remainder has the divisor's sign."""
    d, zero, minus1 = _safe_divisor(b, y, True)
    q, r = b.sdiv(x, d), b.srem(x, d)
    zero_c = const(x.type, 0)
    k = const_int(y)
    if k is not None and k > 0:
        adjust = b.icmp_signed("<", r, zero_c)
    else:
        signs_differ = b.icmp_signed("<", b.xor(r, d), zero_c)
        adjust = b.and_(b.icmp_signed("!=", r, zero_c), signs_differ)
    if want_mod:
        res = b.select(adjust, b.add(r, d), r)
    else:
        res = b.sub(q, b.zext(adjust, x.type))
    return _fix_special(b, x, res, want_mod, zero, minus1)


def compare(b: ir.IRBuilder, op: CmpOp, x, y, dtype: str):
    if op.__class__ is not CmpOp:
        raise BuildError(f"unknown comparison '{op}'")
    is_ne = op is CmpOp.NE
    op = op.symbol                 # llvmlite names its predicates by the same symbols
    if dtypes.is_float(dtype):
        # '!=' is true when either side is NaN (as in Python and NumPy); the rest are ordered
        return b.fcmp_unordered(op, x, y) if is_ne else b.fcmp_ordered(op, x, y)
    if dtype in _UNSIGNED:
        return b.icmp_unsigned(op, x, y)
    return b.icmp_signed(op, x, y)


def cast(b: ir.IRBuilder, v, src: str, dst: str):
    """Convert *v* from dtype *src* to *dst* (C semantics: float to int truncates toward zero).

    bfloat16 converts as ml_dtypes does, through float32: its register already holds the float32
    value, and a conversion to it is one to float32 rounded to bfloat16 (so a float64 or an
    int32 is rounded twice, as ``x.astype(ml_dtypes.bfloat16)`` rounds it)."""
    if src == dst:
        return v
    if src == dtypes.BFLOAT16:
        return cast(b, v, "float32", dst)
    if dst == dtypes.BFLOAT16:
        return bfloat16.round_value(b, cast(b, v, src, "float32"))
    dt = like(v.type, scalar_type(dst))
    if dst == dtypes.BOOL:
        zero = const(v.type, 0)
        if dtypes.is_float(src):
            return b.fcmp_unordered("!=", v, zero)
        return b.icmp_signed("!=", v, zero)
    if dtypes.is_float(src) and dtypes.is_float(dst):
        sb, db = _FLOAT_BITS[type(elem_type(v.type))], _FLOAT_BITS[type(elem_type(dt))]
        return b.fpext(v, dt) if db > sb else b.fptrunc(v, dt)
    if dtypes.is_float(dst):
        return b.uitofp(v, dt) if src in _UNSIGNED else b.sitofp(v, dt)
    if dtypes.is_float(src):
        return _float_to_int(b, v, dt, dst)
    sw, dw = elem_type(v.type).width, elem_type(dt).width
    if dw < sw:
        return b.trunc(v, dt)
    if dw == sw:
        return v                   # int8 <-> uint8: same bits
    return b.zext(v, dt) if src in _UNSIGNED else b.sext(v, dt)


def _float_to_int(b, v, dt, dst):
    """NumPy's float -> integer cast on x86-64, a C cast (``cvtt*2si``, then truncation).

    The value rounds toward zero; NaN and values outside int32 (int64 for int64) give that
    type's minimum, and int8, int16 and uint8 keep the low bits of the int32 result.  LLVM's
    ``fptosi`` of such a value is poison, which would spread into selects, clamped indices and
    stores: the select below never picks it.  The same on every target, by choice: AArch64's
    conversion (and so NumPy there) saturates and turns NaN into 0, but one semantics keeps a
    kernel's results the same on every machine it is exported to.
    """
    if isinstance(elem_type(v.type), ir.HalfType):     # as NumPy: via float32, where 2**31 fits
        v = b.fpext(v, like(v.type, F32))
    wide = I64 if dst == "int64" else I32
    wt = like(v.type, wide)
    limit = 2.0 ** (wide.width - 1)
    in_range = b.and_(b.fcmp_ordered(">=", v, const(v.type, -limit)),
                      b.fcmp_ordered("<", v, const(v.type, limit)))
    r = b.select(in_range, b.fptosi(v, wt), const(wt, -limit))
    return r if elem_type(dt) == wide else b.trunc(r, dt)


def logical(b: ir.IRBuilder, op: LogicOp, x, y):
    if x.type != y.type or elem_type(x.type) != I1:
        raise BuildError(f"'{op}' needs two boolean operands")
    return b.and_(x, y) if op is LogicOp.AND else b.or_(x, y)
