"""bfloat16 in registers: a float32 whose low 16 bits are zero.

bfloat16 is the top half of a float32 (sign, the same 8 exponent bits, 7 fraction bits), so a
kernel keeps every bfloat16 value in a float32 register and computes in float32, as PyTorch and
XLA do on CPUs without bfloat16 arithmetic.  The invariant: *a value of dtype bfloat16 in a
register is exactly a bfloat16 number*.  What produces one keeps it:

- a load widens the 16 bits in memory (``zext``, ``shl 16``, ``bitcast``: no rounding);
- an operation whose result is bfloat16 (``+ - * /``, a math function, a cast to bfloat16)
  computes in float32 and rounds the result to bfloat16, to nearest even, as ml_dtypes does
  per operation (float32 holds more than twice bfloat16's 8 significant bits plus two, so
  rounding the float32 result again is the correctly rounded bfloat16 result of ``+ - * /``);
- ``max``, ``min``, ``select`` and constants (rounded when declared) are exact already;
- a store keeps the top 16 bits.

Everything is integer arithmetic on the bits, on scalars and vectors alike, so vector loads
and stores stay vector instructions (AVX2: ``vpmovzxwd``/``vpslld`` in, ``vpackusdw`` out) on
any LLVM and any CPU, without LLVM's ``bfloat`` type (which llvmlite's IR builder lacks, and
which x86 lowers to a compiler-rt call per element without AVX512-BF16).

NaN stays NaN: rounding adds up to 0x8000 to the bits, which would carry a NaN with a small
payload into infinity, so NaNs become the quiet NaN ``0x7FC0`` with their sign, as ml_dtypes
(Eigen's ``float_to_bfloat16_rtne``) makes them.
"""
from __future__ import annotations

from llvmlite import ir

from .irtypes import F32, I32, const, like

I16 = ir.IntType(16)

_HALF_ULP = 0x7FFF            # added with the kept part's lowest bit: round half to even
_QUIET_NAN = 0x7FC00000       # exponent all ones, top fraction bit set
_SIGN = 0x80000000
_HIGH = 0xFFFF0000


def widen(b: ir.IRBuilder, bits):
    """The float32 (scalar or vector) of bfloat16 *bits* (i16 lanes), exactly."""
    wide = b.zext(bits, like(bits.type, I32))
    return b.bitcast(b.shl(wide, const(wide.type, 16)), like(bits.type, F32), name="bf16.widen")


def _rounded_high(b: ir.IRBuilder, x):
    """The bits of float32 *x* rounded to bfloat16, in the high half of an i32 (the low half
    zero): to nearest even, NaN as a quiet NaN of its sign."""
    it = like(x.type, I32)
    bits = b.bitcast(x, it)
    odd = b.and_(b.lshr(bits, const(it, 16)), const(it, 1))
    rounded = b.and_(b.add(b.add(bits, const(it, _HALF_ULP)), odd), const(it, _HIGH))
    nan = b.or_(b.and_(bits, const(it, _SIGN)), const(it, _QUIET_NAN))
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.select(is_nan, nan, rounded)


def round_value(b: ir.IRBuilder, x):
    """float32 *x* rounded to the nearest bfloat16, still a float32 (the register form)."""
    return b.bitcast(_rounded_high(b, x), x.type, name="bf16.round")


def narrow(b: ir.IRBuilder, x):
    """The 16 bits in memory of the bfloat16 register value *x*: its top half (*x* is exact
    by the invariant, so nothing is rounded here)."""
    it = like(x.type, I32)
    high = b.lshr(b.bitcast(x, it), const(it, 16))
    return b.trunc(high, like(x.type, I16), name="bf16.narrow")
