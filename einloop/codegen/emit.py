"""LoweredFunc -> ``llvmlite.ir.Module``: the kernel function and its statements.

The kernel is ``i32 @name(ptr noalias %arg..., ptr noalias %temp..., i64 %var..., i32
%nthreads)``, one i64 per symbolic extent (``LoweredFunc.vars``).  One
:class:`FunctionEmitter` emits one LLVM function (the kernel, or the worker of a parallel loop);
expression, vector and parallel emission live in mixins of their own modules.  Local buffers are
allocated once in the entry block of the function that owns them, which makes them per thread
inside parallel workers: on the stack up to a budget per function, else by malloc.

A malloc that fails must not crash the process.  The function then frees what it got, adds one
to the module's failure counter and returns without running its body; the kernel returns 1
(:data:`STATUS_NO_MEMORY`) when the counter moved during the call, else 0.  A counter rather
than a flag, because a worker cannot reach the kernel's frame; so a concurrent call of the same
compiled kernel that fails can make this one report the failure too, but a failure is never
missed.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from llvmlite import ir

from ..errors import BuildError, InternalError
from ..ir import stmt as L
from ..ir import dtypes
from ..ir import expr as E
from ..ir.visit import StmtVisitor
from ..schedule.passes.vectorize import vectorize_loops
from .analysis import Analysis, branching_update
from .exprs import ExprMixin, Ramp
from .extern import emit_call
from .irtypes import (I32, I64, PTR, VOID, add_string_attr, alloca, const, declare, elem_size,
                      mem_type)
from .memory import element_ptr
from .tensor_call import appendix, emit_intrinsic_call
from .parallel import ParallelMixin
from .vector import VectorMixin

#: bytes of local buffers per function that live on the stack; the rest are malloc'ed.
STACK_LIMIT = 256 * 1024
#: what the kernel returns when a local buffer could not be allocated (0: success).
STATUS_NO_MEMORY = 1
_MAX_BYTES = 2 ** 63 - 1
#: the cache line a prefetch is issued per: 64 bytes on every x86-64 core and most AArch64 ones;
#: where lines are 128 bytes (Apple's cores) every other prefetch repeats one, harmlessly
CACHE_LINE_BYTES = 64
#: a prefetched range of up to this many lines is issued as straight-line code, a longer one as
#: a loop (a row of 4 KiB is 64 lines: a page, the farthest the hardware prefetchers look)
PREFETCH_UNROLL_LINES = 65


class KernelContext:
    """What all functions of one kernel module share."""

    def __init__(self, module, func, target, symbol):
        self.module, self.func, self.target, self.symbol = module, func, target, symbol
        self.an = Analysis()
        self.parallel_loops = 0
        self.alloc_failures = None      # the module's failure counter, made on first malloc
        self.intrinsics = {}            # symbol -> IntrinsicCall: tensor intrinsics called
        self._stream_md = None

    def stream_hint(self):
        """The ``!{i32 1}`` node a nontemporal store carries (one per module)."""
        if self._stream_md is None:
            self._stream_md = self.module.add_metadata([const(I32, 1)])
        return self._stream_md

    def failure_counter(self):
        if self.alloc_failures is None:
            g = ir.GlobalVariable(self.module, I64, name=f"{self.symbol}.alloc_failures")
            g.linkage = "internal"
            g.initializer = const(I64, 0)
            g.type = PTR
            self.alloc_failures = g
        return self.alloc_failures

    def next_id(self) -> int:
        """A fresh number for the functions outlined from a parallel loop."""
        self.parallel_loops += 1
        return self.parallel_loops - 1

    def function(self, name, fnty, internal=True):
        fn = ir.Function(self.module, fnty, name=name)
        fn.attributes.add("nounwind")
        if internal:
            fn.linkage = "internal"
        # LLVM prefers 256-bit vectors on AVX-512 CPUs and splits wider IR vectors; ask for the
        # full width (a target without AVX-512 simply uses what it has; other backends than
        # X86 ignore the attribute)
        add_string_attr(fn, "prefer-vector-width", "512")
        return fn


class FunctionEmitter(StmtVisitor, ExprMixin, VectorMixin, ParallelMixin):
    """Emits statements into one LLVM function: ``visit(stmt)`` emits *stmt* at the builder's
    position (one ``visit_<Node>`` per statement node)."""

    def __init__(self, k: KernelContext, fn: ir.Function, in_parallel=False, nthreads=None):
        self.k, self.fn = k, fn
        self.in_parallel, self.nthreads = in_parallel, nthreads
        self.entry_b = ir.IRBuilder(fn.append_basic_block("entry"))
        self._body_bb = fn.append_basic_block("body")
        self.b = ir.IRBuilder(self._body_bb)
        self.vars: dict = {}
        self.bufs: dict = {}
        self.buf_names: dict = {}
        self.vec = None
        self._frees = []
        self._stack_bytes = 0
        self.streamed = False       # a nontemporal store was emitted: fence before returning
        self.tiles = False          # AMX tile code was emitted: release the tiles on return

    def bind_buffer(self, buf, ptr):
        self.bufs[id(buf)] = ptr
        if buf.scope is not L.Scope.LOCAL:
            self.buf_names.setdefault(buf.name, ptr)

    def buffer_ptr(self, buf):
        p = self.bufs.get(id(buf))
        if p is None and buf.scope is not L.Scope.LOCAL:
            p = self.buf_names.get(buf.name)
        if p is None:
            raise InternalError(f"codegen: buffer {buf.name} ({buf.scope.value}) is used but is "
                                "not a kernel argument, a temp, or allocated around its use")
        return p

    def finish(self):
        """Close the function: check and free its mallocs, return its status (see the module)."""
        kernel = self.fn.function_type.return_type == I32
        free = declare(self.k.module, "free", VOID, [PTR]) if self._frees else None
        failed = self._failed(kernel, free) if self._frees else None
        counter = self.k.alloc_failures
        if kernel and counter is not None:      # the entry block runs before any worker
            before = self.entry_b.load_atomic(counter, "monotonic", 8, name="failures", typ=I64)
        if self.streamed:
            # streaming stores are weakly ordered: drain them before another thread (the
            # team's join, the caller) may read what they wrote.  On x86 that takes sfence: a
            # seq_cst fence becomes a locked or, which orders ordinary stores only
            if self.k.target.is_x86:
                self.b.call(declare(self.k.module, "llvm.x86.sse.sfence", VOID, []), [])
            else:
                self.b.fence("seq_cst")
        if self.tiles:
            # the tiles' state (8 kilobytes) stays live until released: every context switch
            # would save and restore it, and the next tile configuration would wait on it
            self.b.call(declare(self.k.module, "llvm.x86.tilerelease", VOID, []), [])
        if failed is None:
            self.entry_b.branch(self._body_bb)
        else:
            self.entry_b.cbranch(self._mallocs_ok(), self._body_bb, failed)
        for p in self._frees:
            self.b.call(free, [p])
        if not kernel:
            self.b.ret_void()
        elif counter is None:
            self.b.ret(const(I32, 0))
        else:
            after = self.b.load_atomic(counter, "monotonic", 8, typ=I64)
            self.b.ret(self.b.zext(self.b.icmp_unsigned("!=", after, before), I32))

    def _mallocs_ok(self):
        e = self.entry_b
        oks = [e.icmp_unsigned("!=", p, PTR(None)) for p in self._frees]
        ok = oks[0]
        for o in oks[1:]:
            ok = e.and_(ok, o)
        return ok

    def _failed(self, kernel, free):
        """The block a failed malloc leads to: free the rest, count the failure, return."""
        failed = ir.IRBuilder(self.fn.append_basic_block("alloc.failed"))
        for p in self._frees:
            failed.call(free, [p])                       # free(NULL) does nothing
        failed.atomic_rmw("add", self.k.failure_counter(), const(I64, 1), "monotonic")
        if kernel:
            failed.ret(const(I32, STATUS_NO_MEMORY))
        else:
            failed.ret_void()
        return failed.block

    @staticmethod
    def _restore(table, key, old):
        if old is None:
            table.pop(key, None)
        else:
            table[key] = old

    # statements ----------------------------------------------------------------------------
    def visit_Seq(self, s):
        for x in s.stmts:
            self.visit(x)

    def visit_Store(self, s):
        self.store_index(s.buffer, self.expr(s.index), self.expr(s.value), s.buffer.dtype,
                         s.nontemporal)

    def visit_Prefetch(self, s: L.Prefetch):
        """One ``llvm.prefetch`` (read, keep in all levels) per cache line of the range, in a
        loop when the range spans more than PREFETCH_UNROLL_LINES lines.  The addresses are not
        ``inbounds``: a prefetch past the buffer's end is a hint that never faults.  Inside a
        vectorized loop (a loop its lanes run through together) a range that differs from lane to
        lane is not prefetched: a hint, and one range per lane would be as many."""
        index = self.expr(s.index)
        if self.vec is not None and (isinstance(index, Ramp)
                                     or isinstance(index.type, ir.VectorType)):
            return
        b = self.b
        start = element_ptr(b, self.buffer_ptr(s.buffer), index, mem_type(s.buffer.dtype),
                            masked=True)
        # a range that starts mid-line touches one line more than its length in lines
        lines = -(-(s.extent * elem_size(s.buffer.dtype)) // CACHE_LINE_BYTES) + 1
        fn = declare(b.module, "llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        hint = [const(I32, 0), const(I32, 3), const(I32, 1)]    # read, all cache levels, data

        def fetch(line):
            offset = b.mul(line, const(I64, CACHE_LINE_BYTES))
            b.call(fn, [b.gep(start, [offset], source_etype=ir.IntType(8)), *hint])
        if lines <= PREFETCH_UNROLL_LINES:
            for n in range(lines):
                fetch(const(I64, n))
        else:
            self.counted_loop("prefetch", const(I64, 0), const(I64, lines), fetch)

    def visit_ExternCall(self, s: L.ExternCall):
        emit_call(self, s)

    def visit_IntrinsicCall(self, s: L.IntrinsicCall):
        emit_intrinsic_call(self, s)

    def visit_LetStmt(self, s):
        old = self.vars.get(id(s.var))
        self.vars[id(s.var)] = self.expr(s.value)
        self.visit(s.body)
        self._restore(self.vars, id(s.var), old)

    def visit_For(self, s: L.For):
        """A loop as its kind says: the vectorize pass decided which loops can be lanes or
        threads, so a kind that cannot be honoured here is a bug in that pass."""
        static = isinstance(s.extent, int)
        if static and s.extent < 1:
            raise InternalError(f"codegen: loop {s.var.name} has extent {s.extent!r}; "
                                "expected a positive int or a symbolic extent")
        if self.vec is not None:
            # outer-loop vectorization: a serial loop inside runs its body on all lanes at once
            # (the vectorize pass checked that its extent is the same for every lane)
            if s.kind in (L.ForKind.PARALLEL, L.ForKind.VECTORIZED):
                raise InternalError(f"codegen: {s.kind.value} loop {s.var.name} is inside a "
                                    "vectorized loop; the vectorize pass should have made one "
                                    "of them serial")
        elif s.kind is L.ForKind.PARALLEL:
            if self.in_parallel:
                raise InternalError(f"codegen: parallel loop {s.var.name} is inside another "
                                    "parallel loop; the vectorize pass should have made it serial")
            if self.parallel_ok():
                self.parallel_for(s)
                return
        elif s.kind is L.ForKind.VECTORIZED:
            if not static or s.extent < 2:
                raise InternalError(f"codegen: vectorized loop {s.var.name} has one iteration; "
                                    "the vectorize pass should have made it serial")
            self.vector_for(s)
            return
        if static:
            self.serial_for(s, const(I64, 0), const(I64, s.extent))
        else:                                   # may run 0 times
            self.serial_for(s, const(I64, 0), self._scalar_extent(s), guard=True)

    def _scalar_extent(self, s: L.For):
        """The symbolic extent of loop *s* as one scalar: inside vector code, the same for every
        lane, as the vectorize pass checked."""
        e = self.expr(s.extent)
        if isinstance(e, Ramp) or isinstance(e.type, ir.VectorType):
            raise InternalError(f"codegen: the extent of loop {s.var.name} differs from lane to "
                                "lane; the vectorize pass should have made its vector loop serial")
        return e

    def serial_for(self, s: L.For, start, end, guard=False):
        def body(i):
            old = self.vars.get(id(s.var))
            self.vars[id(s.var)] = i if s.var.dtype == "int64" else self.b.trunc(
                i, ir.IntType(dtypes.bits(s.var.dtype)))
            self.visit(s.body)
            self._restore(self.vars, id(s.var), old)
        self.counted_loop(s.var.name, start, end, body, guard)

    def counted_loop(self, name, start, end, body, guard=False):
        """``for i in range(start, end): body(i)`` (i64); *guard* when it may run 0 times."""
        b = self.b
        header = b.append_basic_block(f"for.{name}")
        exit_bb = b.append_basic_block(f"for.{name}.end")
        pre = b.block
        if guard:
            b.cbranch(b.icmp_signed("<", start, end), header, exit_bb)
        else:
            b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=name)
        i.add_incoming(start, pre)
        body(i)
        nxt = b.add(i, const(I64, 1), name=f"{name}.next", flags=("nuw", "nsw"))
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, end), header, exit_bb)
        b.position_at_end(exit_bb)

    def visit_IfThenElse(self, s: L.IfThenElse):
        c = self.value(s.cond)
        if isinstance(c.type, ir.VectorType):
            self.vector_if(s, c)
            return
        b = self.b
        then_bb = b.append_basic_block("if.then")
        else_bb = b.append_basic_block("if.else") if s.else_case is not None else None
        end_bb = b.append_basic_block("if.end")
        b.cbranch(c, then_bb, else_bb or end_bb)
        b.position_at_end(then_bb)
        self.visit(s.then_case)
        b.branch(end_bb)
        if else_bb is not None:
            b.position_at_end(else_bb)
            self.visit(s.else_case)
            b.branch(end_bb)
        b.position_at_end(end_bb)

    def visit_Allocate(self, s: L.Allocate):
        buf = s.buffer
        if id(buf) not in self.bufs:
            self.bufs[id(buf)] = self._allocate(buf)
        self.visit(s.body)

    def _allocate(self, buf):
        """Hoisted to the entry block: the stack while its budget lasts, else malloc/free."""
        if not all(isinstance(d, int) for d in buf.shape):
            return self._allocate_symbolic(buf)
        nbytes = max(buf.size * elem_size(buf.dtype), 1)
        if nbytes > _MAX_BYTES:
            raise BuildError(f"kernel {self.k.func.name}: local buffer {buf.name} "
                             f"({buf.dtype}[{', '.join(map(str, buf.shape))}]) needs {nbytes} "
                             f"bytes, more than a 64-bit address space holds; compute a smaller "
                             "region of it at a time (compute_at an inner loop)")
        if self._stack_bytes + nbytes <= STACK_LIMIT:
            self._stack_bytes += nbytes
            return alloca(self.entry_b, mem_type(buf.dtype), const(I64, max(buf.size, 1)),
                          buf.name, 64)
        malloc = declare(self.k.module, "malloc", PTR, [I64])
        p = self.entry_b.call(malloc, [const(I64, nbytes)], name=buf.name)
        self._frees.append(p)
        return p


    def _allocate_symbolic(self, buf):
        """malloc in the entry block of a size computed there from the symbolic extents (the
        function's parameters), checked and freed with the other mallocs."""
        size = E.const(elem_size(buf.dtype))
        for d in buf.shape:
            size = size * E.as_expr(d)
        body, self.b = self.b, self.entry_b
        try:
            nbytes = self.expr(E.Binary(E.BinOp.MAX, size, E.const(1), dtypes.INDEX))
        finally:
            self.b = body
        malloc = declare(self.k.module, "malloc", PTR, [I64])
        p = self.entry_b.call(malloc, [nbytes], name=buf.name)
        self._frees.append(p)
        return p


_SYMBOL = re.compile(r"[^A-Za-z0-9_]")


def _check_func(func: L.LoweredFunc):
    for group, scope in ((func.args, L.Scope.ARG), (func.temps, L.Scope.TEMP)):
        for buf in group:
            if buf.scope is not scope:
                raise BuildError(f"buffer {buf.name} is listed as {scope.value} of kernel "
                                 f"{func.name} but has scope {buf.scope.value}")
            if buf.dtype not in dtypes.SUPPORTED:
                raise BuildError(f"buffer {buf.name} has unsupported dtype {buf.dtype!r}")
    names = [b.name for b in func.args + func.temps]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BuildError(f"kernel {func.name} has several buffers named {', '.join(dup)}")


def symbol_name(func: L.LoweredFunc) -> str:
    """The kernel's function in its LLVM module: ``einloop_`` and the name as an identifier, so
    that no kernel name (``exp``, ``free``) is a C library function the code also calls."""
    return "einloop_" + _SYMBOL.sub("_", func.name)


class Emitted(NamedTuple):
    module: ir.Module
    symbol: str          # the kernel's function name in the module
    parallel: bool       # does it launch thread teams (and so use the thread count)?
    loop_vectorize: bool  # may LLVM's loop vectorizer run on it (see analysis.branching_update)
    appendix: str = ""   # LLVM IR text to follow the module's: tensor intrinsics' definitions


def build_module(func: L.LoweredFunc, target) -> Emitted:
    """Emit *func* for *target*.

    Its loop kinds are decided first (:func:`~einloop.schedule.passes.vectorize.vectorize_loops`:
    a no-op on what ``lower`` made, the same decisions and warnings for hand-made IR).
    """
    _check_func(func)
    body = vectorize_loops(func.body)
    if body is not func.body:
        func = L.LoweredFunc(func.name, func.args, func.temps, body, func.attrs, func.vars)
    symbol = symbol_name(func)
    module = ir.Module(name=func.name)
    module.triple = target.triple
    k = KernelContext(module, func, target, symbol)
    buffers = tuple(func.args) + tuple(func.temps)
    fnty = ir.FunctionType(I32, [PTR] * len(buffers) + [I64] * len(func.vars) + [I32])
    fn = k.function(symbol, fnty, internal=False)
    em = FunctionEmitter(k, fn, nthreads=fn.args[-1])
    for arg, buf in zip(fn.args, buffers):
        arg.name = buf.name
        arg.add_attribute("noalias")
        em.bind_buffer(buf, arg)
    for arg, var in zip(fn.args[len(buffers):], func.vars):
        arg.name = var.name
        em.vars[id(var)] = arg
    fn.args[-1].name = "nthreads"
    em.visit(func.body)
    em.finish()
    return Emitted(module, symbol, k.parallel_loops > 0, not branching_update(func.body),
                   appendix(module, k.intrinsics))
