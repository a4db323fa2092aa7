"""The native half of :mod:`einloop.runtime.blas`: OpenBLAS's jobs run on a libgomp team.

OpenBLAS calls its threads callback as ``callback(sync, dojob, numjobs, elsize, jobdata,
dojob_data)`` and expects ``dojob(i, jobdata + i * elsize, dojob_data)`` to run for every job
``i`` *at the same time*: the jobs of a threaded GEMM wait for each other's packed panels, so
two jobs run one after the other on one thread would wait forever.  The bridge therefore asks
libgomp for a team of ``numjobs`` threads, and thread ``i`` runs job ``i``.  A team can come
out smaller (a region nested in another, ``OMP_THREAD_LIMIT``, ``OMP_DYNAMIC``): then the
team's master starts a POSIX thread for each missing job and joins them after its own, so the
jobs still run side by side.

The IR is JIT-compiled once per process (:func:`install`), and linked into every exported
library that has a parallel kernel (:data:`BRIDGE_SYMBOL`), so that a process which only loads
libraries has a bridge too.  ``einloop__blas_bridge_calls`` counts the calls (what tests
check, and how a user can see that NumPy's BLAS runs on einloop's pool).
"""
from __future__ import annotations

import ctypes


from ..runtime import blas
from ..runtime.blas import BRIDGE_SYMBOL, CALLS_SYMBOL
from .target import host_engine

BRIDGE_IR = f"""
%ctx = type {{ ptr, ptr, i64, i32, i32 }}   ; dojob, jobdata, elsize, dojob_data, numjobs
%start = type {{ ptr, i32 }}               ; a started thread's context and job

@{CALLS_SYMBOL} = global i64 0

declare void @GOMP_parallel(ptr, ptr, i32, i32)
declare i32 @omp_get_thread_num()
declare i32 @omp_get_num_threads()
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)

define void @{BRIDGE_SYMBOL}(i32 %sync, ptr %dojob, i32 %numjobs, i64 %elsize, ptr %jobdata,
                             i32 %dojob_data) {{
entry:
  %c = alloca %ctx
  store ptr %dojob, ptr %c
  %p.data = getelementptr inbounds %ctx, ptr %c, i32 0, i32 1
  store ptr %jobdata, ptr %p.data
  %p.size = getelementptr inbounds %ctx, ptr %c, i32 0, i32 2
  store i64 %elsize, ptr %p.size
  %p.dd = getelementptr inbounds %ctx, ptr %c, i32 0, i32 3
  store i32 %dojob_data, ptr %p.dd
  %p.n = getelementptr inbounds %ctx, ptr %c, i32 0, i32 4
  store i32 %numjobs, ptr %p.n
  %old = atomicrmw add ptr @{CALLS_SYMBOL}, i64 1 monotonic
  %alone = icmp sle i32 %numjobs, 1
  br i1 %alone, label %one, label %team
one:
  call void @bridge.team(ptr %c)
  ret void
team:
  call void @GOMP_parallel(ptr @bridge.team, ptr %c, i32 %numjobs, i32 0)
  ret void
}}

; job i: dojob(i, jobdata + i * elsize, dojob_data)
define internal void @bridge.job(ptr %c, i32 %job) {{
  %dojob = load ptr, ptr %c
  %p.data = getelementptr inbounds %ctx, ptr %c, i32 0, i32 1
  %data = load ptr, ptr %p.data
  %p.size = getelementptr inbounds %ctx, ptr %c, i32 0, i32 2
  %size = load i64, ptr %p.size
  %p.dd = getelementptr inbounds %ctx, ptr %c, i32 0, i32 3
  %dd = load i32, ptr %p.dd
  %j = sext i32 %job to i64
  %offset = mul i64 %j, %size
  %mine = getelementptr inbounds i8, ptr %data, i64 %offset
  call void %dojob(i32 %job, ptr %mine, i32 %dd)
  ret void
}}

define internal ptr @bridge.thread(ptr %s) {{
  %c = load ptr, ptr %s
  %p.job = getelementptr inbounds %start, ptr %s, i32 0, i32 1
  %job = load i32, ptr %p.job
  call void @bridge.job(ptr %c, i32 %job)
  ret ptr null
}}

; every team thread: thread i runs job i; a team short of jobs gets the rest as POSIX threads
define internal void @bridge.team(ptr %c) {{
entry:
  %tid = call i32 @omp_get_thread_num()
  %nt = call i32 @omp_get_num_threads()
  %p.n = getelementptr inbounds %ctx, ptr %c, i32 0, i32 4
  %numjobs = load i32, ptr %p.n
  %master = icmp eq i32 %tid, 0
  %short = icmp slt i32 %nt, %numjobs
  %spawn = and i1 %master, %short
  br i1 %spawn, label %start, label %own
own:
  %mine = icmp slt i32 %tid, %numjobs
  br i1 %mine, label %run, label %done
run:
  call void @bridge.job(ptr %c, i32 %tid)
  br label %done
done:
  ret void
start:
  %extra = sub i32 %numjobs, %nt
  %handles = alloca i64, i32 %extra
  %started = alloca i8, i32 %extra
  %starts = alloca %start, i32 %extra
  br label %start.loop
start.loop:
  %i = phi i32 [ 0, %start ], [ %i.next, %start.next ]
  %h = getelementptr i64, ptr %handles, i32 %i
  %ok = getelementptr i8, ptr %started, i32 %i
  %s = getelementptr %start, ptr %starts, i32 %i
  store ptr %c, ptr %s
  %p.job = getelementptr inbounds %start, ptr %s, i32 0, i32 1
  %job = add i32 %nt, %i
  store i32 %job, ptr %p.job
  %rc = call i32 @pthread_create(ptr %h, ptr null, ptr @bridge.thread, ptr %s)
  %created = icmp eq i32 %rc, 0
  %flag = zext i1 %created to i8
  store i8 %flag, ptr %ok
  br i1 %created, label %start.next, label %start.inline
start.inline:            ; no thread to be had (as OpenBLAS's own server, nothing better left)
  call void @bridge.job(ptr %c, i32 %job)
  br label %start.next
start.next:
  %i.next = add i32 %i, 1
  %more = icmp slt i32 %i.next, %extra
  br i1 %more, label %start.loop, label %master.job
master.job:
  call void @bridge.job(ptr %c, i32 %tid)
  br label %join.loop
join.loop:
  %k = phi i32 [ 0, %master.job ], [ %k.next, %join.next ]
  %ok.k = getelementptr i8, ptr %started, i32 %k
  %was = load i8, ptr %ok.k
  %join = icmp ne i8 %was, 0
  br i1 %join, label %join.one, label %join.next
join.one:
  %h.k = getelementptr i64, ptr %handles, i32 %k
  %handle = load i64, ptr %h.k
  %jrc = call i32 @pthread_join(i64 %handle, ptr null)
  br label %join.next
join.next:
  %k.next = add i32 %k, 1
  %more.k = icmp slt i32 %k.next, %extra
  br i1 %more.k, label %join.loop, label %done
}}
"""

_engine = None


def install():
    """JIT-compile the bridge for the host once per process and offer it to
    :mod:`einloop.runtime.blas` (the engine lives as long as the process: OpenBLAS keeps the
    address).  The caller holds the JIT lock and has registered libgomp's symbols."""
    global _engine
    if _engine is None:
        _engine = host_engine(BRIDGE_IR)
        blas.set_bridge(_engine.get_function_address(BRIDGE_SYMBOL), _engine)
    blas.share_blas_threads()


def calls() -> int:
    """How many calls the JIT-compiled bridge has run in this process (0 before install)."""
    if _engine is None:
        return 0
    return ctypes.c_int64.from_address(_engine.get_global_value_address(CALLS_SYMBOL)).value
