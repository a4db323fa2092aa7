"""Support functions that LLVM's code generator calls but that no process library reliably has.

LLVM lowers some operations to calls of compiler-rt helpers: on x86-64, ``fptrunc double to half``
always becomes ``__truncdfhf2``, and without F16C every float16 conversion (and so every float16
operation) becomes ``__truncsfhf2``/``__extendhfsf2``.  They live in compiler-rt or in libgcc_s
from GCC 12 on, neither of which a Python process is sure to have, and MCJIT leaves an unresolved
call at address 0.  So einloop defines them here in integer-only LLVM IR (which needs no helper
itself), JIT-compiles them once per process and registers their addresses, which every kernel's
engine then resolves.  Conversions round to nearest even, exactly as NumPy's casts.
"""
from __future__ import annotations

import struct

import llvmlite.binding as llvm

from .target import host_engine


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


#: the helpers as LLVM IR text: JIT-compiled here, linked into exported libraries by export.py
HELPERS_IR = """
define float @__extendhfsf2(half %h) {{
  %bits = bitcast half %h to i16
  %x = zext i16 %bits to i32
  %s = and i32 %x, 32768
  %sign = shl i32 %s, 16
  %e = lshr i32 %x, 10
  %exp = and i32 %e, 31
  %m = and i32 %x, 1023
  %mbits = shl i32 %m, 13
  %ebias = add i32 %exp, 112
  %ebits = shl i32 %ebias, 23
  %normal = or i32 %ebits, %mbits
  %infnan = or i32 %mbits, 2139095040
  ; zero and subnormals: m * 2**-24 is exact and a normal float (no denormal arithmetic)
  %mf = uitofp i32 %m to float
  %subf = fmul float %mf, 0x3E70000000000000
  %sub = bitcast float %subf to i32
  %special = icmp eq i32 %exp, 31
  %tiny = icmp eq i32 %exp, 0
  %r1 = select i1 %special, i32 %infnan, i32 %normal
  %r2 = select i1 %tiny, i32 %sub, i32 %r1
  %r3 = or i32 %r2, %sign
  %r = bitcast i32 %r3 to float
  ret float %r
}}

define half @__truncdfhf2(double %d) {{
  %x = bitcast double %d to i64
  %s = lshr i64 %x, 48
  %sign = and i64 %s, 32768
  %a = and i64 %x, 9223372036854775807
  ; NaN stays a quiet NaN with the top payload bits
  %pl = lshr i64 %a, 42
  %payload = and i64 %pl, 511
  %nan = or i64 %payload, 32256
  ; normal halves: rebias the exponent, round the 42 dropped bits to nearest even
  %t = sub i64 %a, {rebias}
  %tl = lshr i64 %t, 42
  %todd = and i64 %tl, 1
  %tb = add i64 %todd, 2199023255551
  %tr = add i64 %t, %tb
  %normal = lshr i64 %tr, 42
  ; subnormal halves: the significand shifted right by 1051 - exponent (at most 63), rounded
  %E = lshr i64 %a, 52
  %mant = and i64 %a, 4503599627370495
  %M = or i64 %mant, 4503599627370496
  %sh0 = sub i64 1051, %E
  %far = icmp ugt i64 %sh0, 63
  %sh = select i1 %far, i64 63, i64 %sh0
  %q = lshr i64 %M, %sh
  %qodd = and i64 %q, 1
  %shm1 = sub i64 %sh, 1
  %halfway = shl i64 1, %shm1
  %hb = add i64 %halfway, -1
  %mb = add i64 %M, %hb
  %mr = add i64 %mb, %qodd
  %sub = lshr i64 %mr, %sh
  %isnan = icmp ugt i64 %a, {inf}
  %isinf = icmp uge i64 %a, {overflow}
  %isnormal = icmp uge i64 %a, {min_normal}
  %r1 = select i1 %isnormal, i64 %normal, i64 %sub
  %r2 = select i1 %isinf, i64 31744, i64 %r1
  %r3 = select i1 %isnan, i64 %nan, i64 %r2
  %r4 = or i64 %r3, %sign
  %r5 = trunc i64 %r4 to i16
  %r = bitcast i16 %r5 to half
  ret half %r
}}

define half @__truncsfhf2(float %f) {{
  %d = fpext float %f to double
  %r = call half @__truncdfhf2(double %d)
  ret half %r
}}
""".format(inf=_bits(float("inf")), overflow=_bits(65520.0),   # 65520 and up round to inf
           min_normal=_bits(2.0 ** -14), rebias=(1023 - 15) << 52)

#: the helpers defined here (and registered for every engine of this process).
HELPERS = ("__extendhfsf2", "__truncdfhf2", "__truncsfhf2")

_engine = None


def install():
    """Compile the helpers for the host once per process and register their addresses.

    The caller holds the JIT lock.  The engine is kept for the life of the process, since
    registered addresses point into its code.
    """
    global _engine
    if _engine is not None:
        return
    engine = host_engine(HELPERS_IR)
    for name in HELPERS:
        llvm.add_symbol(name, engine.get_function_address(name))
    _engine = engine
