"""``s.cache_read(T, scope, readers, dtype=...)``: read *T* through a copy widened to *dtype*.

The copy ``T.<scope>[...] = T[...].astype(dtype)`` is made once, outside the readers' loops, so
a reader that casts every element it reads (``A[i, k].astype("int32")``) reads the wider copy
and casts that instead: the AVX2 int8 intrinsic then loads a pair of A already in int16 with one
broadcast, where it would widen it on every use.  A reader's value must not change, so:

- *dtype* holds every value of *T*'s dtype exactly (uint8 -> int16, int8 -> float32,
  bfloat16 -> float32...; not int32 -> float32, whose 24-bit significand drops bits), so
  ``cast(d, widen(x)) == cast(d, x)`` for every *d* a reader casts to;
- every read of *T* in the readers is the operand of a cast (a read used as *T*'s dtype, say
  ``A[i, k] + 1`` wrapping in uint8, would compute in *dtype* instead).

Either broken is a :class:`~einloop.errors.ScheduleError` saying which read or which dtypes.
"""
from __future__ import annotations

from ..arith import transform
from ..errors import ScheduleError, TEError
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import walk
from ..te.tensor import ComputeOp

#: significand bits (with the implicit one) of the float dtypes: an integer of at most that
#: many bits, or a float of fewer significand and exponent bits, is held exactly
_SIGNIFICAND = {"float16": 11, dtypes.BFLOAT16: 8, "float32": 24, "float64": 53}
_EXPONENT = {"float16": 5, dtypes.BFLOAT16: 8, "float32": 8, "float64": 11}


def holds_exactly(wide, narrow) -> bool:
    """Does dtype *wide* represent every value of dtype *narrow* exactly?"""
    if wide == narrow or narrow == dtypes.BOOL:
        return True
    if dtypes.is_int(narrow):
        lo, hi = dtypes.int_range(narrow)
        if dtypes.is_int(wide):
            wlo, whi = dtypes.int_range(wide)
            return wlo <= lo and hi <= whi
        return dtypes.is_float(wide) and max(-lo, hi) <= 2 ** _SIGNIFICAND[wide]
    return (dtypes.is_float(narrow) and dtypes.is_float(wide)
            and _SIGNIFICAND[narrow] <= _SIGNIFICAND[wide]
            and _EXPONENT[narrow] <= _EXPONENT[wide])


def widened_dtype(stage, dtype) -> str:
    """*dtype*'s canonical name; a ScheduleError for one einloop does not know."""
    try:
        return dtypes.canonical(dtype, f"cache_read of {stage.name}: dtype")
    except TEError as e:
        raise ScheduleError(str(e)) from None


def check_widening(stage, src, dtype, readers):
    """Raise a ScheduleError unless copying *src* (the tensor of *stage*) as *dtype* keeps what
    each of *readers* computes (module docstring)."""
    where = f"cache_read of {stage.name} as {dtype}"
    if not holds_exactly(dtype, src.dtype):
        raise ScheduleError(f"{where}: {dtype} does not hold every {src.dtype} value exactly; "
                            "a widened copy must change no value (e.g. uint8 or int8 as "
                            "int16, bfloat16 as float32)")
    for r in readers:
        bare = _bare_reads(r.op.body, src.op)
        if bare:
            raise ScheduleError(f"{where}: stage {r.name} reads {bare[0]} as {src.dtype}, not "
                                f"through a cast; it would compute in {dtype} instead. Only "
                                f"reads that are cast (e.g. {src.name}[...].astype('int32')) "
                                "can read a widened copy")


def widened_op(name, axis, src, dtype) -> ComputeOp:
    """``<name>[axis] = src[axis].astype(dtype)``."""
    read = src[tuple(iv.var for iv in axis)]
    return ComputeOp(name, axis, E.Cast(dtype, read) if dtype != src.dtype else read, ())


def redirect_cast_reads(op, src_op, copy):
    """*op* with every ``cast(d, src[ix])`` made ``cast(d, copy[ix])`` (dropping a cast to
    the copy's own dtype)."""
    def fn(x):
        if type(x) is E.Cast and _is_read_of(x.value, src_op):
            read = E.TensorRead(copy, x.value.indices, copy.dtype)
            return read if x.dtype == copy.dtype else E.Cast(x.dtype, read)
        return None
    return ComputeOp(op.name, op.axis, transform(op.body, fn), op.reduce_axis, op.attrs)


def _is_read_of(x, src_op):
    return type(x) is E.TensorRead and x.tensor.op is src_op


def _bare_reads(body, src_op) -> list:
    """The reads of *src_op* in *body* that are not a cast's operand."""
    cast_reads = {id(x.value) for x in walk(body) if type(x) is E.Cast
                  and _is_read_of(x.value, src_op)}
    return [x for x in walk(body) if _is_read_of(x, src_op) and id(x) not in cast_reads]
