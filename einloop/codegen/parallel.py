"""Parallel loops: outlined into a function run by every thread of a libgomp team.

For ``parallel for i in range(E): body`` the kernel stores what the body uses from outside
(buffer pointers, enclosing loop and let variables) and a counter of claimed iterations into a
stack struct and calls ``GOMP_parallel(outlined, &struct, min(nthreads, E), 0)``.
``outlined(data)`` unpacks the struct and calls a ``noinline`` worker whose buffer parameters
are ``noalias`` (a pointer loaded from a struct would lose that, and with it vectorization).
The worker claims guided chunks of ``0 .. E-1`` from the counter until none is left, rather
than taking a fixed ``1/threads`` of them: a statically split loop runs at the speed of its
slowest thread, and the thread that shares a core with another runtime's spinning workers
(OpenBLAS after a NumPy call, PyTorch's OpenMP pool) or another process runs at half speed.
On Linux a team thread woken on the master's CPU first moves off it (:meth:`_move_off_master`),
and a thread with no chunk left moves a thread preempted in its chunk onto its own CPU
(:mod:`.team`).
A parallel loop inside another one was made serial by the vectorize pass
(:mod:`einloop.schedule.passes.vectorize`).
libgomp is loaded on first use by :mod:`einloop.runtime.gomp`, with the spin count timed by
:mod:`.threads`, and registered with LLVM here so that JIT-compiled kernels resolve it.
"""
from __future__ import annotations

import ctypes

from llvmlite import ir
import llvmlite.binding as llvm

from ..errors import InternalError
from ..runtime import gomp
from ..runtime.threads import GompRuntime
from . import blas_bridge, team
from .irtypes import I32, I64, PTR, VOID, alloca, const, declare, lanes_of
from .llvm import llvm_lock
from .threads import default_spin_count

_registered = None      # the GompRuntime registered with LLVM, once libgomp is loaded

#: A claim takes the unclaimed iterations / (CHUNKS_PER_THREAD * threads): the first claims
#: give each thread at most 1/CHUNKS_PER_THREAD of its fair share, so a thread slowed by a busy
#: core holds up the loop by at most that, and a loop of E iterations costs each thread about
#: CHUNKS_PER_THREAD * ln(E) claims (an atomic compare-and-swap each), nothing next to its work.
#: A finer split (4) balanced no better next to a spinning core, so the claims stay few.
CHUNKS_PER_THREAD = 2
#: bytes of a CPU set for sched_{get,set}affinity: glibc's cpu_set_t, 1024 CPUs
CPU_SET_BYTES = team.CPU_SET_BYTES


def gomp_runtime() -> GompRuntime | None:
    """The libgomp parallel loops run on and the spin setting it read when loaded (loading it
    on first use, warning once if it cannot be found), or None."""
    global _registered
    if _registered is None:
        with llvm_lock:     # before gomp's lock: the spin count is timed by JIT-compiled code
            if _registered is None:
                rt = gomp.gomp_runtime(default_spin_count)
                if rt is None:
                    return None
                try:
                    llvm.load_library_permanently(rt.path)
                except RuntimeError as exc:
                    raise InternalError(f"libgomp {rt.library} is loaded but LLVM cannot "
                                        f"load it: {exc}") from None
                _pin_symbols(rt)
                team.install()
                _registered = rt
                blas_bridge.install()   # OpenBLAS's threads onto this pool (runtime.blas)
    return _registered


def _pin_symbols(rt):
    """Resolve every OpenMP entry point of JIT-compiled kernels in *rt*'s library, before any
    other definition in the process: a kernel never calls two runtimes (a second copy of
    libgomp, loaded by another library, may come first in the process's symbol scope)."""
    lib = ctypes.CDLL(rt.path)       # loaded already: the same library
    for name in gomp.RUNTIME_SYMBOLS:
        try:
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
        except AttributeError:
            raise InternalError(f"the OpenMP runtime {rt.path} has no "
                                f"{name}") from None


def gomp_available() -> bool:
    """Can parallel loops run on libgomp threads in this process?"""
    return gomp_runtime() is not None


class ParallelMixin:
    """Outlining of parallel For loops; part of the function emitter."""

    def parallel_ok(self) -> bool:
        """Can this parallel loop get a thread team (nesting was ruled out by the vectorize
        pass)?"""
        return gomp_available()

    def parallel_for(self, s):
        caps = self._captures(s)
        k = self.k.next_id()
        worker = self._worker(s, caps, f"{self.k.symbol}.par{k}.worker")
        # after the captures: the shared count of claimed iterations, the master's CPU (where
        # threads are placed, see _move_off_master), and a symbolic extent (computed here, it
        # travels to the threads)
        fields = caps + [("next", [], const(I64, 0))]
        if self._places_threads():
            fields.append(("cpu", [], const(I32, -1)))
            fields.append(("team", [], self._team_block()))
        if not isinstance(s.extent, int):
            fields.append(("extent", [s.var], self.expr(s.extent)))
        outlined = self._outlined(s, fields, len(caps), worker, f"{self.k.symbol}.par{k}")
        b = self.b
        struct_t = ir.LiteralStructType([c[2].type for c in fields])
        data = alloca(self.entry_b, struct_t, name=f"{s.var.name}.captures")
        for n, (_, _, v) in enumerate(fields):     # the counter is reset for every run
            b.store(v, self._field(b, data, struct_t, n))
        if isinstance(s.extent, int):
            n_threads = b.select(b.icmp_signed("<", self.nthreads, const(I32, s.extent)),
                                 self.nthreads, const(I32, s.extent), name="team")
        else:               # no more threads than iterations (0 iterations: the call alone)
            ext = fields[-1][2]
            wide = b.sext(self.nthreads, I64)
            n_threads = b.trunc(b.select(b.icmp_signed("<", wide, ext), wide, ext), I32,
                                name="team")
        fn_ptr = ir.FormattedConstant(PTR, outlined.get_reference())
        team_bb = b.append_basic_block(f"par.{s.var.name}.team")
        alone_bb = b.append_basic_block(f"par.{s.var.name}.alone")
        end_bb = b.append_basic_block(f"par.{s.var.name}.end")
        if self._places_threads():
            reset = declare(self.k.module, team.RESET, VOID, [PTR, I32])
            b.call(reset, [self._team_block(), n_threads])
        b.cbranch(b.icmp_signed(">", n_threads, const(I32, 1)), team_bb, alone_bb)
        b.position_at_end(team_bb)
        if self._places_threads():
            getcpu = declare(self.k.module, "sched_getcpu", I32, [])
            b.store(b.call(getcpu, [], name="master.cpu"),
                    self._field(b, data, struct_t, len(caps) + 1))
        gomp = declare(self.k.module, "GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        b.call(gomp, [fn_ptr, data, n_threads, const(I32, 0)])
        b.branch(end_bb)
        b.position_at_end(alone_bb)
        b.call(outlined, [data])
        b.branch(end_bb)
        b.position_at_end(end_bb)

    def _team_block(self):
        """The block of :mod:`.team` slots this function's parallel loops share (one at a
        time: a loop inside a parallel loop is serial), allocated on first use."""
        block = getattr(self, "_team", None)
        if block is None:
            block = alloca(self.entry_b, ir.ArrayType(ir.IntType(8), team.TEAM_BYTES),
                           name="team", align=64)
            self._team = block
        return block

    def _places_threads(self) -> bool:
        """Do this target's team threads move off the master's CPU (Linux: ``sched_getcpu``
        and ``sched_{get,set}affinity``, in glibc and musl alike)?"""
        return self.k.target.system == "linux"

    def _captures(self, s):
        """``[(kind, objects, value)]`` for the buffers and variables used from outside.

        Buffer objects that resolve to one pointer share one capture: two ``noalias`` worker
        parameters must never point to the same memory.
        """
        free_vars, free_bufs = self.k.an.free_names(s)
        caps, by_ptr = [], {}
        for buf in free_bufs.values():
            ptr = self.buffer_ptr(buf)
            if id(ptr) not in by_ptr:
                by_ptr[id(ptr)] = ("buf", [], ptr)
                caps.append(by_ptr[id(ptr)])
            by_ptr[id(ptr)][1].append(buf)
        for key, var in free_vars.items():
            v = self.vars.get(key)
            if v is None or not isinstance(v, ir.Value) or lanes_of(v) is not None:
                raise InternalError(f"codegen: parallel loop {s.var.name} uses variable "
                                    f"{var.name}, which has no scalar value here")
            caps.append(("var", [var], v))
        return caps

    @staticmethod
    def _field(b, data, struct_t, n):
        p = b.gep(data, [const(I32, 0), const(I32, n)], inbounds=True, source_etype=struct_t)
        p.type = PTR
        return p

    def _worker(self, s, caps, name):
        """``worker(next, extent, threads, captures...)``: claim chunks of ``0 .. extent-1``
        from the shared counter *next* and run the loop over each, until none is left.

        Chunks are guided: a claim takes the unclaimed iterations divided by
        ``CHUNKS_PER_THREAD * threads`` (at least one).  A thread that shares its core with
        another busy thread (OpenBLAS's or PyTorch's spinning workers, another process) then
        simply claims fewer chunks instead of holding up the loop with a fixed half of it, and
        the last claims are small, so the threads finish together.  The worker's buffers are
        allocated once per thread, around all its chunks.
        """
        watched = self._places_threads()
        head = [PTR, I64, I64] + ([PTR] if watched else [])
        fnty = ir.FunctionType(VOID, head + [v.type for _, _, v in caps])
        fn = self.k.function(name, fnty)
        fn.attributes.add("noinline")
        em = type(self)(self.k, fn, in_parallel=True)
        counter, extent, threads = fn.args[:3]
        counter.name, extent.name, threads.name = "next", "extent", "threads"
        counter.add_attribute("noalias")
        for arg, (kind, objs, _) in zip(fn.args[len(head):], caps):
            arg.name = objs[0].name
            if kind == "buf":
                arg.add_attribute("noalias")
                for buf in objs:
                    em.bind_buffer(buf, arg)
            else:
                em.vars[id(objs[0])] = arg
        b = em.b
        if watched:
            block = fn.args[3]
            block.name = "team"
            me = b.call(declare(self.k.module, "omp_get_thread_num", I32, []), [], name="me")
            b.call(declare(self.k.module, team.JOIN, VOID, [PTR, I32]), [block, me])
        split = b.mul(threads, const(I64, CHUNKS_PER_THREAD), name="split")
        first = b.load_atomic(counter, "monotonic", 8, name="claimed", typ=I64)
        entry = b.block
        claim = b.append_basic_block("claim")
        take = b.append_basic_block("claim.take")
        run = b.append_basic_block("claim.run")
        done = b.append_basic_block("claim.done")
        b.branch(claim)
        b.position_at_end(claim)
        begin = b.phi(I64, name=f"{s.var.name}.begin")
        begin.add_incoming(first, entry)
        b.cbranch(b.icmp_signed("<", begin, extent), take, done)
        b.position_at_end(take)
        share = b.udiv(b.sub(extent, begin), split, name="share")
        chunk = b.select(b.icmp_unsigned(">", share, const(I64, 0)), share, const(I64, 1),
                         name="chunk")
        end = b.add(begin, chunk, name=f"{s.var.name}.end")
        pair = b.cmpxchg(counter, begin, end, "monotonic", "monotonic")
        seen = b.extract_value(pair, 0, name="seen")
        begin.add_incoming(seen, take)
        b.cbranch(b.extract_value(pair, 1, name="won"), run, claim)
        b.position_at_end(run)
        if watched:
            b.call(declare(self.k.module, team.CHUNK, VOID, [PTR, I32, I64]),
                   [block, me, chunk])
        em.serial_for(s, begin, end)
        if watched:
            b.call(declare(self.k.module, team.CHUNK_DONE, VOID, [PTR, I32]), [block, me])
        after = b.load_atomic(counter, "monotonic", 8, name="claimed", typ=I64)
        begin.add_incoming(after, b.block)
        b.branch(claim)
        b.position_at_end(done)
        if watched:
            b.call(declare(self.k.module, team.LEAVE, VOID, [PTR, I32, I32]),
                   [block, me, b.trunc(threads, I32)])
        em.finish()
        return fn

    def _outlined(self, s, fields, n_caps, worker, name):
        """``outlined(data)``: unpack the captures and run this thread's worker (placed off the
        master's CPU first where the target places threads)."""
        fn = self.k.function(name, ir.FunctionType(VOID, [PTR]))
        data = fn.args[0]
        data.name = "data"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        struct_t = ir.LiteralStructType([v.type for _, _, v in fields])
        vals = [b.load(self._field(b, data, struct_t, n), name=objs[0].name, typ=v.type)
                for n, (_, objs, v) in enumerate(fields[:n_caps])]
        counter = self._field(b, data, struct_t, n_caps)
        if isinstance(s.extent, int):
            extent = const(I64, s.extent)
        else:                                   # the last field (see parallel_for)
            extent = b.load(self._field(b, data, struct_t, len(fields) - 1), name="extent",
                            typ=I64)
        get_num = declare(self.k.module, "omp_get_num_threads", I32, [])
        nt = b.sext(b.call(get_num, [], name="nt32"), I64, name="threads")
        if not self._places_threads():
            b.call(worker, [counter, extent, nt] + vals)
            b.ret_void()
            return fn
        master_cpu = b.load(self._field(b, data, struct_t, n_caps + 1), name="master.cpu",
                            typ=I32)
        block = b.load(self._field(b, data, struct_t, n_caps + 2), name="team", typ=PTR)
        saved = self._move_off_master(fn, b, master_cpu)
        b.call(worker, [counter, extent, nt, block] + vals)
        moved = b.load(saved[1], name="moved", typ=ir.IntType(8))
        back_bb, done_bb = fn.append_basic_block("place.back"), fn.append_basic_block("done")
        b.cbranch(b.trunc(moved, ir.IntType(1)), back_bb, done_bb)
        b.position_at_end(back_bb)
        setaff = declare(self.k.module, "sched_setaffinity", I32, [I32, I64, PTR])
        b.call(setaff, [const(I32, 0), const(I64, CPU_SET_BYTES), saved[0]])
        b.branch(done_bb)
        b.position_at_end(done_bb)
        b.ret_void()
        return fn

    def _move_off_master(self, fn, b, master_cpu):
        """Emit: a team thread that finds itself on the master's CPU leaves it for this region.

        Linux wakes a sleeping thread on its waker's CPU when none is idle (the master wakes
        the team; a CPU is taken by OpenBLAS's spinning worker or another process), and then
        the master and its team share one core while the other runs the spinner: a parallel
        loop at the speed of one core, whatever its chunks.  So a thread other than the master
        that runs on the master's CPU restricts itself to the other CPUs it may use, which
        moves it at once, and restores its CPU set after its chunks; elsewhere (an idle core
        was found) this costs one ``sched_getcpu``.  Returns ``(saved set, moved flag)``
        pointers for the restore.
        """
        i8 = ir.IntType(8)
        saved = alloca(b, ir.ArrayType(i8, CPU_SET_BYTES), name="cpus.saved")
        narrowed = alloca(b, ir.ArrayType(i8, CPU_SET_BYTES), name="cpus.off.master")
        moved = alloca(b, i8, name="moved.flag")
        b.store(const(i8, 0), moved)
        get_tid = declare(self.k.module, "omp_get_thread_num", I32, [])
        getcpu = declare(self.k.module, "sched_getcpu", I32, [])
        getaff = declare(self.k.module, "sched_getaffinity", I32, [I32, I64, PTR])
        setaff = declare(self.k.module, "sched_setaffinity", I32, [I32, I64, PTR])
        check_bb = fn.append_basic_block("place.check")
        move_bb = fn.append_basic_block("place.move")
        run_bb = fn.append_basic_block("run")
        in_team = b.and_(b.icmp_signed("!=", b.call(get_tid, [], name="tid"), const(I32, 0)),
                         b.icmp_unsigned("<", master_cpu, const(I32, CPU_SET_BYTES * 8)))
        b.cbranch(in_team, check_bb, run_bb)
        b.position_at_end(check_bb)
        here = b.call(getcpu, [], name="cpu")
        b.cbranch(b.icmp_signed("==", here, master_cpu), move_bb, run_bb)
        b.position_at_end(move_bb)
        got = b.call(getaff, [const(I32, 0), const(I64, CPU_SET_BYTES), saved])
        ok_bb = fn.append_basic_block("place.narrow")
        b.cbranch(b.icmp_signed("==", got, const(I32, 0)), ok_bb, run_bb)
        b.position_at_end(ok_bb)
        b.call(declare(self.k.module, "llvm.memcpy.p0.p0.i64", VOID,
                       [PTR, PTR, I64, ir.IntType(1)]),
               [narrowed, saved, const(I64, CPU_SET_BYTES), const(ir.IntType(1), 0)])
        byte = b.gep(narrowed, [b.zext(b.lshr(master_cpu, const(I32, 3)), I64)],
                     source_etype=i8)
        byte.type = PTR
        bit = b.trunc(b.shl(const(I32, 1), b.and_(master_cpu, const(I32, 7))), i8)
        b.store(b.and_(b.load(byte, typ=i8), b.xor(bit, const(i8, -1))), byte)
        # fails (EINVAL) when the master's CPU is the only one allowed: then stay
        done = b.call(setaff, [const(I32, 0), const(I64, CPU_SET_BYTES), narrowed])
        b.store(b.zext(b.icmp_signed("==", done, const(I32, 0)), i8), moved)
        b.branch(run_bb)
        b.position_at_end(run_bb)
        return saved, moved
