"""Vectorized loops: lanes, lane masks, and how each load and store is done.

A ``vectorized`` For of extent E becomes explicit SIMD code (as TVM's VectorizeLoop, but done
while emitting): the loop variable is the lane ramp ``base + <0 .. L-1>``: when ``E <= 64``, one
ramp per power of two in E (``L = E`` when E is one), else ``L = 16`` chunks in a serial loop
whose remainder runs once more with a constant lane mask.  A lane-dependent condition narrows
the mask; stores and loads under a mask use masked intrinsics, so lanes that the scalar loop
would not run never touch memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..ir import stmt as L
from . import memory as M
from .arith import cast
from .exprs import Ramp
from .irtypes import I1, I64, const, const_vector, elem_size, lanes_of, mem_type

_MAX_WHOLE = 64     # extents up to this become one vector
_CHUNK = 16         # lanes per chunk for longer loops
#: a load whose lanes' offsets fall into at most _MAX_WINDOWS windows that hold at most
#: _WINDOW_SPAN vectors' worth of elements in all is served by that many vector loads and
#: shuffles instead of a gather (a gather of L lanes costs about L loads on every x86 core; a
#: window load one, plus a shuffle): a stride of 2, ``x // 2``, two interleaved halves
_MAX_WINDOWS = 4
_WINDOW_SPAN = 2


def window_runs(offsets, lanes):
    """Sorted distinct *offsets* grouped into windows ``(lo, hi)``; None when that takes more
    than _MAX_WINDOWS windows or more than _WINDOW_SPAN * *lanes* elements in all."""
    runs, limit = [], _WINDOW_SPAN * lanes
    for o in offsets:
        if runs and o - runs[-1][0] < limit:
            runs[-1][1] = o
        else:
            if len(runs) == _MAX_WINDOWS:
                return None
            runs.append([o, o])
    if sum(hi - lo + 1 for lo, hi in runs) > limit:
        return None
    return [tuple(r) for r in runs]


def _powers_of_two(n):
    """The powers of two that sum to *n*, largest first: 56 -> [32, 16, 8]."""
    return [1 << b for b in reversed(range(n.bit_length())) if n >> b & 1]


def _i32s(values):
    return const_vector(ir.IntType(32), values)


@dataclass(frozen=True)
class VecCtx:
    lanes: int
    mask: object            # None (all lanes active) or an <lanes x i1> value
    nonempty: bool          # known: at least one lane of mask is active


class VectorMixin:
    """Vectorized For emission and the memory-access strategy; part of the function emitter."""

    # loops ---------------------------------------------------------------------------------
    def vector_for(self, s: L.For):
        extent = s.extent
        if extent <= _MAX_WHOLE:
            # one vector per power of two of the extent, largest first (56 = 32 + 16 + 8): LLVM
            # splits a power-of-two vector into whole registers, but a vector of another length
            # (<56 x float>) into single lanes that it inserts and extracts one by one
            base = 0
            for part in _powers_of_two(extent):
                self._vector_chunk(s, const(I64, base), part, None)
                base += part
            return
        full, rem = divmod(extent, _CHUNK)

        def chunk(c):
            base = self.b.mul(c, const(I64, _CHUNK), name=f"{s.var.name}.base", flags=("nsw",))
            self._vector_chunk(s, base, _CHUNK, None)
        self.counted_loop(f"{s.var.name}.chunk", const(I64, 0), const(I64, full), chunk)
        if rem:
            tail = const_vector(I1, [k < rem for k in range(_CHUNK)])
            self._vector_chunk(s, const(I64, full * _CHUNK), _CHUNK, tail)

    def _vector_chunk(self, s, base, lanes, mask):
        saved_vec, saved_var = self.vec, self.vars.get(id(s.var))
        self.vec = VecCtx(lanes, mask, True)
        ramp = Ramp(base, 1, lanes)
        self.vars[id(s.var)] = ramp if s.var.dtype == "int64" else self._cast_lanes(ramp, s.var)
        try:
            self.visit(s.body)
        finally:
            self.vec = saved_vec
            self._restore(self.vars, id(s.var), saved_var)

    def _cast_lanes(self, ramp, var):
        return cast(self.b, self.mat(ramp), "int64", var.dtype)

    # masks ---------------------------------------------------------------------------------
    def and_mask(self, cond):
        """The current mask narrowed by the lane condition *cond*."""
        mask = self.vec.mask
        return cond if mask is None else self.b.and_(mask, cond)

    def under_mask(self, mask, fn):
        """Run *fn* with *mask* as the active lanes (not known to be non-empty)."""
        saved = self.vec
        self.vec = VecCtx(saved.lanes, mask, False)
        try:
            return fn()
        finally:
            self.vec = saved

    def vector_if(self, s: L.IfThenElse, cond):
        b = self.b
        self._masked_stmt(self.and_mask(cond), s.then_case, "then")
        if s.else_case is not None:
            self._masked_stmt(self.and_mask(b.xor(cond, const(cond.type, 1))), s.else_case,
                              "else")

    def _masked_stmt(self, mask, body, name):
        """Run *body* under *mask*, skipping it entirely when no lane is active."""
        b = self.b
        body_bb = b.append_basic_block(f"masked.{name}")
        end_bb = b.append_basic_block(f"masked.{name}.end")
        b.cbranch(M.any_lane(b, mask), body_bb, end_bb)
        b.position_at_end(body_bb)
        saved = self.vec
        self.vec = VecCtx(saved.lanes, mask, True)
        try:
            self.visit(body)
        finally:
            self.vec = saved
        b.branch(end_bb)
        b.position_at_end(end_bb)

    def _mask(self):
        return self.vec.mask if self.vec is not None else None

    def _guard_scalar(self):
        """True when a scalar access in vector code must first check that some lane is active."""
        return self.vec is not None and self.vec.mask is not None and not self.vec.nonempty

    # memory --------------------------------------------------------------------------------
    def load_index(self, buf, idx, dtype):
        b = self.b
        base, mt, align = self.buffer_ptr(buf), mem_type(dtype), elem_size(dtype)
        mask = self._mask()
        name = f"{buf.name}.v"
        if isinstance(idx, Ramp) and idx.stride == 1:
            ptr = M.element_ptr(b, base, idx.base, mt, masked=mask is not None)
            vt = ir.VectorType(mt, idx.lanes)
            v = (M.load(b, ptr, vt, align, name) if mask is None
                 else M.masked_load(b, ptr, vt, align, mask, name))
            return M.from_memory(b, v, dtype)
        if isinstance(idx, Ramp) and mask is None:
            v = self._window_load(base, idx, mt, align, name)
            if v is not None:
                return M.from_memory(b, v, dtype)
        if isinstance(idx, Ramp) or lanes_of(idx) is not None:
            iv = self.mat(idx)
            ptrs = M.element_ptr(b, base, iv, mt, masked=mask is not None)
            v = M.gather(b, ptrs, ir.VectorType(mt, lanes_of(iv)), align, mask, name)
            return M.from_memory(b, v, dtype)

        def scalar():
            return M.from_memory(b, M.load(b, M.element_ptr(b, base, idx, mt), mt, align,
                                           buf.name), dtype)
        if self._guard_scalar():
            zero = const(mem_type(dtype), 0)
            return self.branch_values(M.any_lane(b, mask), scalar,
                                      lambda: M.from_memory(b, zero, dtype), "ld")
        return scalar()

    def _window_load(self, base, idx, mt, align, name):
        """The lanes ``base[idx.base + idx.offsets[k]]`` from at most _MAX_WINDOWS contiguous
        vector loads and shuffles, or None when the offsets spread too far for that (a gather
        then).  A stride of 2 is one load of twice the lanes; ``x // 2`` one load of half the
        lanes; a window covers only elements between two lanes' addresses, so it reads nothing
        the lanes themselves could not (all lanes are active: no mask)."""
        b, lanes = self.b, idx.lanes
        runs = window_runs(sorted(set(idx.offsets)), lanes)
        if runs is None:
            return None
        width = max(hi - lo + 1 for lo, hi in runs)
        parts = []
        for lo, hi in runs:
            ptr = M.element_ptr(b, base, b.add(idx.base, const(I64, lo)), mt)
            v = M.load(b, ptr, ir.VectorType(mt, hi - lo + 1), align, f"{name}.win")
            if hi - lo + 1 < width:             # widen to the common width (lane 0 repeated)
                v = b.shuffle_vector(v, v, _i32s([k if k <= hi - lo else 0
                                                  for k in range(width)]))
            parts.append(v)
        while len(parts) & (len(parts) - 1):    # a power of two, to concatenate pairwise
            parts.append(parts[0])
        while len(parts) > 1:
            n = 2 * lanes_of(parts[0])
            parts = [b.shuffle_vector(parts[i], parts[i + 1], _i32s(list(range(n))))
                     for i in range(0, len(parts), 2)]
        start = {lo: k * width for k, (lo, _) in enumerate(runs)}
        picks = []
        for o in idx.offsets:
            lo = next(lo for lo, hi in runs if lo <= o <= hi)
            picks.append(start[lo] + o - lo)
        return b.shuffle_vector(parts[0], parts[0], _i32s(picks), name=name)

    def store_index(self, buf, idx, value, dtype, nontemporal=False):
        """``buf[idx] = value``: a vector store, a masked one (a tail), a scatter or a scalar
        store.  *nontemporal*: the unmasked vector and scalar stores stream (a masked store or a
        scatter has no streaming form and stays plain)."""
        b = self.b
        base, mt, align = self.buffer_ptr(buf), mem_type(dtype), elem_size(dtype)
        mask = self._mask()
        stream = self.k.stream_hint() if nontemporal else None
        if stream is not None:
            self.streamed = True
        if isinstance(idx, Ramp) and idx.stride == 1:
            v = M.to_memory(b, self.mat(value, idx.lanes), dtype)
            ptr = M.element_ptr(b, base, idx.base, mt, masked=mask is not None)
            if mask is None:
                M.store(b, v, ptr, align, stream)
            else:
                M.masked_store(b, v, ptr, align, mask)
            return
        lanes = idx.lanes if isinstance(idx, Ramp) else lanes_of(idx)
        if lanes is None:
            lanes = value.lanes if isinstance(value, Ramp) else lanes_of(value)
        if lanes is not None:
            # scatter: lanes writing one address resolve in lane order, as the scalar loop would
            iv = self.mat(idx, lanes)
            v = M.to_memory(b, self.mat(value, lanes), dtype)
            M.scatter(b, v, M.element_ptr(b, base, iv, mt, masked=mask is not None), align, mask)
            return
        if self._guard_scalar():
            body_bb = b.append_basic_block("st.any")
            end_bb = b.append_basic_block("st.end")
            b.cbranch(M.any_lane(b, mask), body_bb, end_bb)
            b.position_at_end(body_bb)
            M.store(b, M.to_memory(b, value, dtype), M.element_ptr(b, base, idx, mt), align)
            b.branch(end_bb)
            b.position_at_end(end_bb)
            return
        M.store(b, M.to_memory(b, value, dtype), M.element_ptr(b, base, idx, mt), align, stream)
