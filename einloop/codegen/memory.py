"""Element, vector, masked and gather/scatter memory accesses.

Masked forms use the LLVM ``llvm.masked.*`` intrinsics, whose inactive lanes never touch memory:
that is what makes a vectorized tail or a guarded (padding) read safe.  They are written in the
long-standing form with an explicit ``i32`` alignment operand, which LLVM >= 22 upgrades to its
newer pointer-attribute form when it parses the module.
"""
from __future__ import annotations

from llvmlite import ir

from . import bfloat16
from .irtypes import I1, I32, I8, PTR, VOID, const, declare, lanes_of, mangle


def element_ptr(b: ir.IRBuilder, base, index, mtype: ir.Type, name="", masked=False):
    """``&base[index]``; a vector *index* gives a vector of pointers.

    ``inbounds`` only when every lane is accessed: under a mask, the first lane's address (or an
    inactive lane's) may lie outside the buffer (a padding read), and an out-of-bounds
    ``inbounds`` address is poison, which would make the active lanes' access undefined.
    """
    p = b.gep(base, [index], inbounds=not masked, source_etype=mtype, name=name)
    lanes = lanes_of(index)
    if lanes is not None:
        p.type = ir.VectorType(PTR, lanes)   # llvmlite types vector GEPs as scalar pointers
    return p


def to_memory(b, v, dtype):
    """Register value -> memory representation (bool is a byte in NumPy arrays, bfloat16 the
    top half of its float32 register)."""
    if dtype == "bool":
        t = ir.VectorType(I8, lanes_of(v)) if lanes_of(v) else I8
        return b.zext(v, t)
    if dtype == "bfloat16":
        return bfloat16.narrow(b, v)
    return v


def from_memory(b, v, dtype):
    """Memory representation -> register value (the inverse of :func:`to_memory`)."""
    if dtype == "bool":
        return b.icmp_unsigned("!=", v, const(v.type, 0))
    if dtype == "bfloat16":
        return bfloat16.widen(b, v)
    return v


def load(b, ptr, mtype, align, name=""):
    return b.load(ptr, name=name, align=align, typ=mtype)


def store(b, value, ptr, align, nontemporal=None):
    """A store; *nontemporal*: the ``!{i32 1}`` metadata node that makes it a streaming
    store (``movnt*`` on x86, ``stnp`` on AArch64), or None."""
    st = b.store(value, ptr, align=align)
    if nontemporal is not None:
        st.set_metadata("nontemporal", nontemporal)
    return st


def masked_load(b, ptr, vtype: ir.VectorType, align, mask, name=""):
    fn = declare(b.module, f"llvm.masked.load.{mangle(vtype)}.p0", vtype,
                 [PTR, I32, mask.type, vtype])
    return b.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(vtype, None)], name=name)


def masked_store(b, value, ptr, align, mask):
    """``ptr[k] = value[k]`` for the lanes *mask* sets; a truncated *value* lane by lane
    (:func:`_lane_by_lane_store`)."""
    if isinstance(value, ir.CastInstr) and value.opname == "trunc":
        return _lane_by_lane_store(b, value, ptr, align, mask)
    vt = value.type
    fn = declare(b.module, f"llvm.masked.store.{mangle(vt)}.p0", VOID, [vt, PTR, I32, mask.type])
    return b.call(fn, [value, ptr, ir.Constant(I32, align), mask])


def _lane_by_lane_store(b, value, ptr, align, mask):
    """``if mask[k]: ptr[k] = value[k]`` for each lane, as scalar stores.

    LLVM 22's X86 backend miscompiles ``llvm.masked.store`` of a truncated vector (an int32
    computation stored as int16 or int8, a bfloat16 result, int64 stored as int32) when, after
    optimisation, its mask is a constant with one lane set -- a vectorized tail with one element
    left: on AVX-512 targets it stores the lane's *wide* element (``vmovss`` or ``movl`` of 4
    bytes for an int16 lane), overwriting the next elements, past the buffer's end at its last
    row.  AVX2 targets store the right width.  Conditional scalar stores never become that
    masked store, and a tail is short: at most a vector's lanes per row."""
    elem = value.type.element
    for k in range(value.type.count):
        with b.if_then(b.extract_element(mask, ir.Constant(I32, k))):
            at = b.gep(ptr, [ir.Constant(I32, k)], inbounds=True, source_etype=elem)
            b.store(b.extract_element(value, ir.Constant(I32, k)), at, align=align)


def gather(b, ptrs, vtype: ir.VectorType, align, mask, name=""):
    mask = mask if mask is not None else all_true(vtype.count)
    fn = declare(b.module, f"llvm.masked.gather.{mangle(vtype)}.{mangle(ptrs.type)}", vtype,
                 [ptrs.type, I32, mask.type, vtype])
    return b.call(fn, [ptrs, ir.Constant(I32, align), mask, ir.Constant(vtype, None)], name=name)


def scatter(b, value, ptrs, align, mask):
    vt = value.type
    mask = mask if mask is not None else all_true(vt.count)
    fn = declare(b.module, f"llvm.masked.scatter.{mangle(vt)}.{mangle(ptrs.type)}", VOID,
                 [vt, ptrs.type, I32, mask.type])
    return b.call(fn, [value, ptrs, ir.Constant(I32, align), mask])


def all_true(lanes):
    return ir.Constant(ir.VectorType(I1, lanes), [ir.Constant(I1, 1)] * lanes)


def any_lane(b, mask, name="any"):
    """i1: is any lane of *mask* set?"""
    fn = declare(b.module, f"llvm.vector.reduce.or.{mangle(mask.type)}", I1, [mask.type])
    return b.call(fn, [mask], name=name)
