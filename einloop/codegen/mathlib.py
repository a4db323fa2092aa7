"""Math intrinsics as inline LLVM IR that works on scalars and on ``<N x T>`` vectors alike.

Calling libm once per lane would scalarise every vectorized loop that uses ``exp`` or ``tanh``, so
float32 functions are built here from range reduction plus polynomials (branch-free, with selects
for the special cases), and therefore vectorize like any other arithmetic.  The polynomial
coefficients were fitted for einloop by near-minimax (Lawson-weighted least squares on Chebyshev
nodes, float64 reference) on the reduced ranges noted beside each table.

float64 favours accuracy: the transcendental functions call libm once per lane.  float16 and
bfloat16 are computed in float32 and rounded.  ``pow`` in float32 goes through an internal float64
exp/log (inline as well) so that large ``y * log(x)`` keeps full float32 accuracy.
"""
from __future__ import annotations

from decimal import Decimal, getcontext
import struct

from llvmlite import ir

from ..errors import BuildError
from . import bfloat16
from .irtypes import (F32, F64, FMF, I32, I64, const, declare, elem_type, intrinsic, is_float_type,
                      lanes_of, like)

# e^r = 1 + r + r^2 P(r),  |r| <= ln2/2
_EXP32 = (0.500000001337948, 0.16666666532288058, 0.041666465527983365, 0.008333360740901387,
          0.0013933597554249976, 0.00019857781887495815)
_EXP64 = (0.5000000000000109, 0.16666666666766733, 0.04166666666342155, 0.008333333224596883,
          0.001388889036450483, 0.00019841587188890145, 2.4799446512871142e-05,
          2.7214513900020093e-06, 2.8542241590563476e-07, 1.4851935315486835e-07)
# log(1+m) = m - m^2/2 + m^3 Q(m),  m in [sqrt(1/2)-1, sqrt(2)-1]
_LOG32 = (0.3333333117352354, -0.24999994010223867, 0.2000071478627356, -0.16668056210037996,
          0.14249320763607837, -0.12420172064778759, 0.11677051175300045, -0.11514416156117463,
          0.07037301203341645)
# log(x) = 2s + s^3 R(s^2),  s = (m-1)/(m+1),  s^2 <= 0.0295
_ATANH64 = (0.666666666666666, 0.3999999999991858, 0.2857142863713407, 0.2222220829040997,
            0.18183111456210005, 0.15324547020929086, 0.14699496669360862)
# tanh(x) = x + x^3 T(x^2),  |x| <= 0.625
_TANH32 = (-0.33333333172286356, 0.13333303575322883, -0.0539592633098097, 0.021768945219315914,
           -0.008344022841425365, 0.0022928236771563647)
# erf(x) = x E(x^2),  |x| <= 1
_ERF32 = (1.1283791670580212, -0.3761263843463549, 0.11283781973873941, -0.02686540002890481,
          0.0052209453962488135, -0.0008482828321960261, 0.00011256944173162769,
          -9.641505566722985e-06)
# erfc(x) = exp(-x^2) F(1/x),  1 <= x <= 3.92 (beyond, erf(x) rounds to 1 in float32)
_ERFC32 = (0.00012928225906344494, 0.5616250030039606, 0.021611612850581205, -0.3804535472207843,
           0.24264645774985288, 0.2171034794948779, -0.513030878134427, 0.4213258643734413,
           -0.17288997579774973, 0.029516283213071644)
_ERF_ONE = 3.92

getcontext().prec = 50
_LN2 = Decimal(2).ln()
_LOG2E = float(1 / _LN2)
_SQRT_HALF = float(Decimal("0.5").sqrt())


def _split_ln2(zero_bits, fmt, uint):
    """ln2 = hi + lo with the low *zero_bits* of hi's mantissa clear, so n*hi is exact."""
    hi_bits = struct.unpack(uint, struct.pack(fmt, float(_LN2)))[0] & ~((1 << zero_bits) - 1)
    hi = struct.unpack(fmt, struct.pack(uint, hi_bits))[0]
    return hi, float(_LN2 - Decimal(hi))


_LN2_32 = _split_ln2(12, "<f", "<I")
_LN2_64 = _split_ln2(32, "<d", "<Q")

SUPPORTED = ("exp", "log", "tanh", "sigmoid", "erf", "pow", "sqrt", "abs", "floor", "ceil",
             "trunc", "round")
_LIBM64 = {"exp": "exp", "log": "log", "tanh": "tanh", "erf": "erf", "pow": "pow"}


class _Ops:
    """Arithmetic on one fixed scalar-or-vector float type, with its same-width integer type."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type):
        self.b, self.t = b, t
        self.it = like(t, I32 if elem_type(t) == F32 else I64)

    def c(self, v):
        return const(self.t, v)

    def ci(self, v):
        return const(self.it, v)

    def add(self, x, y): return self.b.fadd(x, y, flags=FMF)
    def sub(self, x, y): return self.b.fsub(x, y, flags=FMF)
    def mul(self, x, y): return self.b.fmul(x, y, flags=FMF)
    def div(self, x, y): return self.b.fdiv(x, y, flags=FMF)
    def lt(self, x, y): return self.b.fcmp_ordered("<", x, y)
    def gt(self, x, y): return self.b.fcmp_ordered(">", x, y)
    def eq(self, x, y): return self.b.fcmp_ordered("==", x, y)
    def isnan(self, x): return self.b.fcmp_unordered("uno", x, x)
    def sel(self, c, x, y): return self.b.select(c, x, y)
    def fabs(self, x): return intrinsic(self.b, "llvm.fabs", [x])
    def floor(self, x): return intrinsic(self.b, "llvm.floor", [x])
    def copysign(self, x, s): return intrinsic(self.b, "llvm.copysign", [x, s])

    def poly(self, x, coeffs):
        """Horner evaluation of sum(coeffs[i] * x**i)."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.add(self.mul(acc, x), self.c(k))
        return acc

    def clamp(self, x, lo, hi):
        """Clamp into [lo, hi]; NaN becomes 0 so later float->int conversions stay defined."""
        x = self.sel(self.lt(x, self.c(lo)), self.c(lo), x)
        x = self.sel(self.gt(x, self.c(hi)), self.c(hi), x)
        return self.sel(self.isnan(x), self.c(0.0), x)

    def pow2i(self, n):
        """2**n for an integer vector n in the normal exponent range, by building the bits."""
        e = elem_type(self.t)
        mbits, bias = (23, 127) if e == F32 else (52, 1023)
        biased = self.b.add(n, self.ci(bias))
        return self.b.bitcast(self.b.shl(biased, self.ci(mbits)), self.t)


# float32 -------------------------------------------------------------------------------------

def _exp32(o: _Ops, x):
    xc = o.clamp(x, -104.0, 89.0)
    n = o.floor(o.add(o.mul(xc, o.c(_LOG2E)), o.c(0.5)))
    r = o.sub(xc, o.mul(n, o.c(_LN2_32[0])))
    r = o.sub(r, o.mul(n, o.c(_LN2_32[1])))
    p = o.add(o.add(o.mul(o.mul(r, r), o.poly(r, _EXP32)), r), o.c(1.0))
    ni = o.b.fptosi(n, o.it)
    n1 = o.b.ashr(ni, o.ci(1))               # two factors keep 2**n normal down to 2**-150
    res = o.mul(o.mul(p, o.pow2i(n1)), o.pow2i(o.b.sub(ni, n1)))
    res = o.sel(o.lt(x, o.c(-104.0)), o.c(0.0), res)
    return o.sel(o.isnan(x), x, res)


def _log32(o: _Ops, x):
    tiny = o.lt(x, o.c(2.0 ** -126))         # subnormals: scale up first
    xs = o.sel(tiny, o.mul(x, o.c(2.0 ** 23)), x)
    bits = o.b.bitcast(xs, o.it)
    e = o.b.sitofp(o.b.sub(o.b.lshr(bits, o.ci(23)), o.ci(126)), o.t)
    e = o.sub(e, o.sel(tiny, o.c(23.0), o.c(0.0)))
    m = o.b.bitcast(o.b.or_(o.b.and_(bits, o.ci(0x007FFFFF)), o.ci(0x3F000000)), o.t)
    low = o.lt(m, o.c(_SQRT_HALF))
    e = o.sub(e, o.sel(low, o.c(1.0), o.c(0.0)))
    m = o.sub(o.sel(low, o.add(m, m), m), o.c(1.0))
    z = o.mul(m, m)
    y = o.mul(o.mul(m, z), o.poly(m, _LOG32))
    y = o.add(y, o.mul(e, o.c(_LN2_32[1])))
    y = o.sub(y, o.mul(z, o.c(0.5)))
    res = o.add(o.add(m, y), o.mul(e, o.c(_LN2_32[0])))
    res = o.sel(o.eq(x, o.c(float("inf"))), x, res)
    res = o.sel(o.lt(x, o.c(0.0)), o.c(float("nan")), res)
    res = o.sel(o.eq(x, o.c(0.0)), o.c(float("-inf")), res)
    return o.sel(o.isnan(x), x, res)


def _tanh32(o: _Ops, x):
    ax = o.fabs(x)
    e = _exp32(o, o.add(ax, ax))
    big = o.sub(o.c(1.0), o.div(o.c(2.0), o.add(e, o.c(1.0))))
    z = o.mul(x, x)
    small = o.add(x, o.mul(o.mul(x, z), o.poly(z, _TANH32)))
    return o.sel(o.lt(ax, o.c(0.625)), small, o.copysign(big, x))


def _sigmoid32(o: _Ops, x, exp=_exp32):
    e = exp(o, o.b.fneg(o.fabs(x)))          # e <= 1: no overflow, no cancellation
    num = o.sel(o.b.fcmp_ordered(">=", x, o.c(0.0)), o.c(1.0), e)
    return o.div(num, o.add(o.c(1.0), e))


def _erf32(o: _Ops, x):
    ax = o.fabs(x)
    small = o.mul(x, o.poly(o.mul(x, x), _ERF32))
    a = o.sel(o.gt(ax, o.c(_ERF_ONE)), o.c(_ERF_ONE), ax)
    a = o.sel(o.lt(a, o.c(1.0)), o.c(1.0), a)
    erfc = o.mul(_exp32(o, o.b.fneg(o.mul(a, a))), o.poly(o.div(o.c(1.0), a), _ERFC32))
    big = o.copysign(o.sel(o.gt(ax, o.c(_ERF_ONE)), o.c(1.0), o.sub(o.c(1.0), erfc)), x)
    return o.sel(o.lt(ax, o.c(1.0)), small, big)


def _pow32(o: _Ops, x, y):
    d = _Ops(o.b, like(o.t, F64))
    t = d.mul(o.b.fpext(y, d.t), _log64_core(d, o.b.fpext(o.fabs(x), d.t)))
    res = o.b.fptrunc(_exp64_core(d, t), o.t)
    half = o.mul(y, o.c(0.5))
    y_int = o.eq(o.floor(y), y)
    y_odd = o.b.and_(y_int, o.b.fcmp_ordered("!=", o.floor(half), half))
    negative_sign = o.b.icmp_signed("<", o.b.bitcast(x, o.it), o.ci(0))
    res = o.sel(o.b.and_(negative_sign, y_odd), o.b.fneg(res), res)
    domain = o.b.and_(o.lt(x, o.c(0.0)), o.b.not_(y_int))
    domain = o.b.and_(domain, o.b.fcmp_ordered("!=", x, o.c(float("-inf"))))
    res = o.sel(domain, o.c(float("nan")), res)
    one = o.b.or_(o.eq(x, o.c(1.0)), o.b.and_(o.eq(x, o.c(-1.0)),
                                            o.eq(o.fabs(y), o.c(float("inf")))))
    res = o.sel(one, o.c(1.0), res)
    return o.sel(o.eq(y, o.c(0.0)), o.c(1.0), res)


def _exp64_core(o: _Ops, t):
    """exp in float64 to ~1e-13, for arguments whose float32 result is not 0 or inf."""
    tc = o.clamp(t, -110.0, 100.0)
    n = o.floor(o.add(o.mul(tc, o.c(_LOG2E)), o.c(0.5)))
    r = o.sub(o.sub(tc, o.mul(n, o.c(_LN2_64[0]))), o.mul(n, o.c(_LN2_64[1])))
    p = o.add(o.add(o.mul(o.mul(r, r), o.poly(r, _EXP64)), r), o.c(1.0))
    res = o.mul(p, o.pow2i(o.b.fptosi(n, o.it)))
    return o.sel(o.isnan(t), t, res)


def _log64_core(o: _Ops, x):
    """log in float64 to ~1e-15 for x >= 0 that are normal float64 numbers (or 0, inf, NaN)."""
    bits = o.b.bitcast(x, o.it)
    e = o.b.sitofp(o.b.sub(o.b.lshr(bits, o.ci(52)), o.ci(1022)), o.t)
    m = o.b.bitcast(o.b.or_(o.b.and_(bits, o.ci((1 << 52) - 1)), o.ci(0x3FE0000000000000)), o.t)
    low = o.lt(m, o.c(_SQRT_HALF))
    e = o.sub(e, o.sel(low, o.c(1.0), o.c(0.0)))
    m = o.sel(low, o.add(m, m), m)
    s = o.div(o.sub(m, o.c(1.0)), o.add(m, o.c(1.0)))
    z = o.mul(s, s)
    res = o.add(o.add(s, s), o.mul(o.mul(s, z), o.poly(z, _ATANH64)))
    res = o.add(o.add(res, o.mul(e, o.c(_LN2_64[1]))), o.mul(e, o.c(_LN2_64[0])))
    res = o.sel(o.eq(x, o.c(float("inf"))), x, res)
    res = o.sel(o.eq(x, o.c(0.0)), o.c(float("-inf")), res)
    return o.sel(o.isnan(x), x, res)


_F32 = {"exp": _exp32, "log": _log32, "tanh": _tanh32, "sigmoid": _sigmoid32, "erf": _erf32,
        "pow": _pow32}
_LLVM = {"sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc",
         "round": "llvm.roundeven", "abs": "llvm.fabs"}
_ARITY = {"pow": 2}


# float64: libm per lane ------------------------------------------------------------------------

def _per_lane(b: ir.IRBuilder, fname: str, args):
    fn = declare(b.module, fname, F64, [F64] * len(args))
    lanes = lanes_of(args[0])
    if lanes is None:
        return b.call(fn, list(args))
    out = ir.Constant(args[0].type, ir.Undefined)
    for i in range(lanes):
        k = ir.Constant(I32, i)
        out = b.insert_element(out, b.call(fn, [b.extract_element(a, k) for a in args]), k)
    return out


def _libm_exp(o: _Ops, x):
    return _per_lane(o.b, "exp", [x])


def _float64(b, name, args):
    if name == "sigmoid":
        return _sigmoid32(_Ops(b, args[0].type), args[0], exp=_libm_exp)
    return _per_lane(b, _LIBM64[name], args)


# entry point -----------------------------------------------------------------------------------

def emit_call(b: ir.IRBuilder, name: str, args, dtype: str):
    """Emit intrinsic *name* on same-typed scalar or vector operands *args* of dtype *dtype*."""
    if name not in SUPPORTED:
        raise BuildError(f"unknown intrinsic {name!r}; supported: {', '.join(SUPPORTED)}")
    if len(args) != _ARITY.get(name, 1):
        raise BuildError(f"intrinsic {name} takes {_ARITY.get(name, 1)} argument(s), "
                         f"got {len(args)}")
    t = args[0].type
    if not is_float_type(t):
        if name == "abs":
            return _int_abs(b, args[0], dtype)
        raise BuildError(f"intrinsic {name} needs float operands, got dtype {dtype}; "
                         f"cast with .astype('float32') first")
    if dtype == "bfloat16":         # in float32 (the register type), rounded to bfloat16
        return bfloat16.round_value(b, emit_call(b, name, args, "float32"))
    if name in _LLVM:
        return intrinsic(b, _LLVM[name], args)
    if dtype == "float64":
        return _float64(b, name, args)
    if dtype == "float16":
        t32 = like(t, F32)
        r = _F32[name](_Ops(b, t32), *[b.fpext(a, t32) for a in args])
        return b.fptrunc(r, t)
    return _F32[name](_Ops(b, t), *args)


def _int_abs(b, x, dtype):
    if dtype in ("uint8", "bool"):
        return x
    neg = b.icmp_signed("<", x, const(x.type, 0))
    return b.select(neg, b.sub(const(x.type, 0), x), x)
