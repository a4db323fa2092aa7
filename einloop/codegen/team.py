"""A parallel loop's team hands a preempted thread's chunk to a free core (Linux).

Guided chunks (:mod:`.parallel`) keep a slowed thread from holding up a loop with a fixed share
of it, but not with the chunk it holds when the OS takes its core away.  On a core shared with
another busy thread (another process, a runtime's spinning worker) Linux preempts at its
scheduler tick, and the preempted thread waits a whole tick on the run queue (4 ms at the
common 250 Hz, 1 ms at 1000 Hz): a loop of a few milliseconds then waits for it while the rest
of the team sits on an idle core.  Nor does Linux move the waiting thread to the core that
went idle: it was running a moment ago, so the balancer counts it as cache-hot and leaves it.

The same happens before a thread's first chunk: libgomp wakes a team thread onto a core shared
with another busy thread, where it waits its turn while the rest of the team claims every chunk,
and the master then waits at libgomp's closing barrier for a thread that has nothing left to do
(half the calls of a two-region kernel with one of two cores busy, each waiting up to a
scheduler slice).  So the master, once it has no chunk left, moves a team thread that has not
entered the loop :data:`GRACE_NS` after the master did onto its own CPU and yields to it
(:data:`LATE`): the latecomer arrives in microseconds instead of a slice, and puts back its CPU
set on arrival.  Its kernel thread id is what each team thread last recorded in
:data:`TIDS` when it entered a loop of a team this master led (two threads may call parallel
kernels at once, each leading a team), checked to be a thread of this process (``tgkill`` with
no signal) before it is moved; the move is undone by whichever thread takes that slot, so a
table gone stale (a pool that started new threads) moves a thread of this process for a
moment at worst.

So the team keeps a slot per thread in a block the master allocates (:data:`TEAM_BYTES`):
its POSIX thread, the number and iterations of its current chunk, how many iterations it has
finished.  A thread that finds no chunk left to claim (:data:`LEAVE`) watches the others'
slots, timing each chunk from when it first sees it (so the chunks themselves read no clock);
one that lasts more than twice what the watcher's own rate predicts for its iterations, plus
:data:`GRACE_NS`, is taken to be off its core, and the watcher moves its thread onto its own
CPU (``sched_setaffinity`` on its kernel thread id, which migrates a waiting thread at once)
and yields.  The moved thread puts its own CPU set back when its chunk ends.  A watcher on a busy core measures
a slow rate of its own, and a straggler that is running finishes within its predicted time,
so a running thread is rarely moved, and if it is, the cost is one migration.

The slot's state word is the handshake: ``ABSENT`` until its thread enters the loop (or the
master takes ``ABSENT -> MOVING``, moves it and sets ``MOVED``), ``IDLE`` once it has; ``IDLE ->
WORKING`` at a thread's first chunk, ``WORKING -> IDLE`` when it has no chunk left (between
chunks it stays WORKING, so a chunk costs no locked instruction); a watcher takes ``WORKING ->
MOVING``, saves the thread's CPU set into its slot, moves it, and sets ``MOVED`` (or puts the
state back if the move failed) (:data:`MOVE`).  A chunk's end or the thread's entry that finds
``MOVED`` restores the saved set and goes ``IDLE``; one that finds ``MOVING`` does not wait for
the mover, which the OS may have taken off its core (and a thread spinning on the mover's CPU
kept it off for a whole scheduler slice): it marks the slot ``RELEASED`` and goes on, and the
mover, finding it so, puts the saved set back itself and sets ``IDLE``.  A thread leaving the
loop waits for such a mover (:data:`SPIN_NS`, then naps), so it leaves with the CPU set it came
with.  A watcher does not watch a thread whose chunk started on its own CPU (each chunk records
its CPU): that thread cannot run while the watcher does.

Threads numbered :data:`MAX_SLOTS` and up take no part.  The IR is JIT-compiled once per
process (:func:`install`) and linked into exported libraries that have a parallel kernel for
Linux.
"""
from __future__ import annotations

import ctypes
import enum

import llvmlite.binding as llvm

from .target import Target, host_engine

#: threads of a team that keep a slot (a team thread numbered higher takes no part)
MAX_SLOTS = 64
#: bytes of a slot: its fields (48), a CPU set (128) and two more fields (8), rounded up to
#: whole cache lines so that threads writing their own slots do not share a line
SLOT_BYTES = 192
#: the team block: a cache line of header (the count of slots in use and the kernel thread id
#: of the master that set them up, as i32 each), then the slots
HEADER_BYTES = 64
_MASTER = 4     # header field: byte offset
TEAM_BYTES = HEADER_BYTES + MAX_SLOTS * SLOT_BYTES
#: bytes of a CPU set for ``*_{get,set}affinity`` (glibc's cpu_set_t, 1024 CPUs)
CPU_SET_BYTES = 128
#: how much longer than predicted a chunk must last before its thread is taken to be off its
#: core: above the jitter of a running thread (interrupts, page faults: microseconds), below
#: the scheduler ticks it would otherwise wait (1-10 ms on any Linux)
GRACE_NS = 100_000
#: how long a thread leaving the loop spins for the one moving it to put its CPU set back
#: (microseconds when the mover runs) before it sleeps :data:`NAP_NS` at a time: a mover the OS
#: took off its core may be waiting for this very CPU
SPIN_NS = 20_000
NAP_NS = 20_000


class SlotState(enum.IntEnum):
    """The handshake word of a slot (see the module docstring)."""
    IDLE = 0
    WORKING = 1
    MOVING = 2
    MOVED = 3
    ABSENT = 4
    RELEASED = 5


RESET = "einloop_team_reset"        # (team, n): before a region, the first n slots to IDLE
JOIN = "einloop_team_join"          # (team, me): a thread enters the loop
CHUNK = "einloop_team_chunk"        # (team, me, span): a chunk of span iterations starts
CHUNK_DONE = "einloop_team_chunk_done"  # (team, me): it ended
LEAVE = "einloop_team_leave"        # (team, me, n): no chunk left: watch the others
SYMBOLS = (RESET, JOIN, CHUNK, CHUNK_DONE, LEAVE)
MOVE = "einloop_team_move"          # (slot, tid, cpus, back) -> i32: a mover's steps after it
                                    # took a slot (:class:`Move`); called by the team, and tests
PUBLIC = SYMBOLS + (MOVE,)          # the functions an exported library keeps (hidden)
MOVES = "einloop_team_moves"         # i64: threads moved onto a watcher's CPU, in this process
LATE = "einloop_team_latecomers"    # i64: threads moved onto the master's CPU before entering
TIDS = "einloop_team_tids"          # [MAX_SLOTS x i64]: per slot, the last thread to enter
                                    # (master's id << 32 | its own kernel thread id)
GLOBALS = (MOVES, LATE, TIDS)

# slot fields: byte offsets (_TID: the slot's kernel thread, recorded as it enters; _MOVED_TID:
# the thread a mover moved, whose CPU set _MASK holds: the slot's, or the one the master took
# for it while the slot was absent; _CPU: where the thread started its current chunk)
_STATE, _SEQ, _SPAN, _DONE, _JOINED, _TID, _MASK, _MOVED_TID, _CPU = (
    0, 4, 16, 24, 32, 40, 48, 48 + CPU_SET_BYTES, 52 + CPU_SET_BYTES)


class Move(enum.IntEnum):
    """What :data:`MOVE` did."""
    FAILED = 0          # the thread could not be moved: the slot is back to its state before
    MOVED = 1           # the thread runs on the mover's CPU set until its chunk ends
    WENT_ON = 2         # the thread went on meanwhile: its CPU set is back, the slot IDLE


def team_ir(x86: bool) -> str:
    """The team's functions as LLVM IR text; *x86*: spin loops use ``pause``."""
    relax = "call void @llvm.x86.sse2.pause()" if x86 else ""
    relax_decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    s = SlotState
    return f"""
{relax_decl}
@{MOVES} = global i64 0
@{LATE} = global i64 0
@{TIDS} = global [{MAX_SLOTS} x i64] zeroinitializer

declare i32 @sched_getcpu()
declare i32 @sched_yield()
declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @sched_setaffinity(i32, i64, ptr)
declare i32 @gettid()
declare i32 @getpid()
declare i32 @tgkill(i32, i32, i32)
declare i32 @clock_gettime(i32, ptr)
declare i32 @nanosleep(ptr, ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

; CLOCK_MONOTONIC in nanoseconds
define internal i64 @team.now() {{
  %ts = alloca {{ i64, i64 }}
  %rc = call i32 @clock_gettime(i32 1, ptr %ts)
  %sec = load i64, ptr %ts
  %p.ns = getelementptr inbounds {{ i64, i64 }}, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %p.ns
  %sec.ns = mul i64 %sec, 1000000000
  %t = add i64 %sec.ns, %ns
  ret i64 %t
}}

define internal ptr @team.slot(ptr %team, i32 %i) {{
  %w = sext i32 %i to i64
  %off = mul i64 %w, {SLOT_BYTES}
  %at = add i64 %off, {HEADER_BYTES}
  %p = getelementptr inbounds i8, ptr %team, i64 %at
  ret ptr %p
}}

define internal ptr @team.field(ptr %slot, i64 %off) {{
  %p = getelementptr inbounds i8, ptr %slot, i64 %off
  ret ptr %p
}}

; The CPU this thread runs on, or -1 where it cannot be told or lies beyond a CPU set
define internal i32 @team.cpu() {{
  %cpu = call i32 @sched_getcpu()
  %lo = icmp sge i32 %cpu, 0
  %hi = icmp slt i32 %cpu, {CPU_SET_BYTES * 8}
  %ok = and i1 %lo, %hi
  %r = select i1 %ok, i32 %cpu, i32 -1
  ret i32 %r
}}

; %set: the CPU set of CPU %cpu alone (0 <= %cpu < CPU_SET_BYTES * 8)
define internal void @team.one_cpu(ptr %set, i32 %cpu) {{
  call void @llvm.memset.p0.i64(ptr %set, i8 0, i64 {CPU_SET_BYTES}, i1 false)
  %byte.i = lshr i32 %cpu, 3
  %byte.w = zext i32 %byte.i to i64
  %p.byte = getelementptr inbounds i8, ptr %set, i64 %byte.w
  %bit.i = and i32 %cpu, 7
  %bit.w = shl i32 1, %bit.i
  %bit = trunc i32 %bit.w to i8
  store i8 %bit, ptr %p.byte
  ret void
}}

; Thread %me's slot in this loop, or null: only the first slots RESET set up take part (their
; count is in the header); a loop run alone, or with no iterations, has fewer than the threads
; that may call it (a kernel called from inside another library's OpenMP team sees that team's
; thread numbers).
define internal ptr @team.own(ptr %team, i32 %me) {{
entry:
  %count = load i32, ptr %team
  %lo = icmp sge i32 %me, 0
  %hi = icmp slt i32 %me, %count
  %in = and i1 %lo, %hi
  br i1 %in, label %slot, label %none
slot:
  %p = call ptr @team.slot(ptr %team, i32 %me)
  ret ptr %p
none:
  ret ptr null
}}

define void @{RESET}(ptr %team, i32 %n) {{
entry:
  %few = icmp slt i32 %n, {MAX_SLOTS}
  %capped = select i1 %few, i32 %n, i32 {MAX_SLOTS}
  %some = icmp sgt i32 %capped, 0
  %m = select i1 %some, i32 %capped, i32 0
  store i32 %m, ptr %team
  %master = call i32 @gettid()
  %p.master = getelementptr inbounds i8, ptr %team, i64 {_MASTER}
  store i32 %master, ptr %p.master
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i.next, %body ]
  %more = icmp slt i32 %i, %m
  br i1 %more, label %body, label %done
body:
  %slot = call ptr @team.slot(ptr %team, i32 %i)
  store i32 {s.ABSENT}, ptr %slot
  %i.next = add i32 %i, 1
  br label %loop
done:
  ret void
}}

define void @{JOIN}(ptr %team, i32 %me) {{
entry:
  %slot = call ptr @team.own(ptr %team, i32 %me)
  %in = icmp ne ptr %slot, null
  br i1 %in, label %join, label %out
join:
  %tid = call i32 @gettid()
  %p.master = getelementptr inbounds i8, ptr %team, i64 {_MASTER}
  %master = load i32, ptr %p.master
  %master.w = zext i32 %master to i64
  %master.hi = shl i64 %master.w, 32
  %tid.w = zext i32 %tid to i64
  %entry.v = or i64 %master.hi, %tid.w
  %me.w = sext i32 %me to i64
  %p.tid = getelementptr inbounds [{MAX_SLOTS} x i64], ptr @{TIDS}, i64 0, i64 %me.w
  %known = load atomic i64, ptr %p.tid monotonic, align 8
  %same = icmp eq i64 %known, %entry.v
  br i1 %same, label %arrive, label %record
record:                                 ; the table's line is shared: written only on a change
  store atomic i64 %entry.v, ptr %p.tid monotonic, align 8
  br label %arrive
arrive:
  call void @team.idle(ptr %slot, i32 {s.ABSENT})
  %p.own.tid = call ptr @team.field(ptr %slot, i64 {_TID})
  store i32 %tid, ptr %p.own.tid
  %p.done = call ptr @team.field(ptr %slot, i64 {_DONE})
  store i64 0, ptr %p.done
  %now = call i64 @team.now()
  %p.joined = call ptr @team.field(ptr %slot, i64 {_JOINED})
  store i64 %now, ptr %p.joined
  br label %out
out:
  ret void
}}

; A chunk starts.  Between chunks a thread stays WORKING (no locked instruction per chunk);
; only an IDLE thread marks itself, and a watcher's MOVING or MOVED is left for it to see.
define void @{CHUNK}(ptr %team, i32 %me, i64 %span) {{
entry:
  %slot = call ptr @team.own(ptr %team, i32 %me)
  %in = icmp ne ptr %slot, null
  br i1 %in, label %start, label %out
start:
  %p.span = call ptr @team.field(ptr %slot, i64 {_SPAN})
  store atomic i64 %span, ptr %p.span monotonic, align 8
  %p.seq = call ptr @team.field(ptr %slot, i64 {_SEQ})
  %seq = load atomic i32, ptr %p.seq monotonic, align 4
  %seq.next = add i32 %seq, 1
  store atomic i32 %seq.next, ptr %p.seq monotonic, align 4
  %cpu = call i32 @team.cpu()
  %p.cpu = call ptr @team.field(ptr %slot, i64 {_CPU})
  store atomic i32 %cpu, ptr %p.cpu monotonic, align 4
  %st = load atomic i32, ptr %slot monotonic, align 4
  %idle = icmp eq i32 %st, {s.IDLE}
  br i1 %idle, label %mark, label %out
mark:
  store atomic i32 {s.WORKING}, ptr %slot release, align 4
  br label %out
out:
  ret void
}}

; The chunk ended: count it, and if a watcher moved this thread meanwhile, settle.
define void @{CHUNK_DONE}(ptr %team, i32 %me) {{
entry:
  %slot = call ptr @team.own(ptr %team, i32 %me)
  %in = icmp ne ptr %slot, null
  br i1 %in, label %count, label %out
count:
  %p.span = call ptr @team.field(ptr %slot, i64 {_SPAN})
  %span = load atomic i64, ptr %p.span monotonic, align 8
  %p.done = call ptr @team.field(ptr %slot, i64 {_DONE})
  %done = load i64, ptr %p.done
  %sum = add i64 %done, %span
  store i64 %sum, ptr %p.done
  %st = load atomic i32, ptr %slot acquire, align 4
  %still = icmp eq i32 %st, {s.WORKING}
  br i1 %still, label %out, label %settle
settle:
  call void @team.idle(ptr %slot, i32 {s.WORKING})
  br label %out
out:
  ret void
}}

; %from -> IDLE (WORKING: the thread's last chunk ended; ABSENT: it enters the loop).  A
; thread that was moved (MOVED) puts back the CPU set saved in its slot, onto the thread the
; mover moved: itself, or the thread the master fetched in its place if the table of thread ids
; was stale.  One being moved (MOVING) does not wait for its mover, which the OS may have taken
; off its core: it marks the slot RELEASED and goes on, and the mover puts the set back.  Any
; other state is left as it is.
define internal void @team.idle(ptr %slot, i32 %from) {{
entry:
  br label %try
try:
  %pair = cmpxchg ptr %slot, i32 %from, i32 {s.IDLE} acq_rel acquire
  %ended = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %ended, label %out, label %look
look:
  %seen = extractvalue {{ i32, i1 }} %pair, 0
  %moved = icmp eq i32 %seen, {s.MOVED}
  br i1 %moved, label %restore, label %moving.check
moving.check:
  %moving = icmp eq i32 %seen, {s.MOVING}
  br i1 %moving, label %release, label %out
release:                                ; being moved: go on (else it is MOVED now)
  %rel = cmpxchg ptr %slot, i32 {s.MOVING}, i32 {s.RELEASED} acq_rel acquire
  %let.go = extractvalue {{ i32, i1 }} %rel, 1
  br i1 %let.go, label %out, label %try
restore:
  %p.tid = call ptr @team.field(ptr %slot, i64 {_MOVED_TID})
  %tid = load i32, ptr %p.tid
  %p.mask = call ptr @team.field(ptr %slot, i64 {_MASK})
  %rc = call i32 @sched_setaffinity(i32 %tid, i64 {CPU_SET_BYTES}, ptr %p.mask)
  store atomic i32 {s.IDLE}, ptr %slot release, align 4
  br label %out
out:
  ret void
}}

; A taken slot (MOVING) goes back to %back, or to IDLE if its thread went on meanwhile
; (RELEASED: nothing was changed, nothing to put back).
define internal void @team.put_back(ptr %slot, i32 %back) {{
entry:
  %pair = cmpxchg ptr %slot, i32 {s.MOVING}, i32 %back release monotonic
  %ok = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %ok, label %out, label %went.on
went.on:
  store atomic i32 {s.IDLE}, ptr %slot release, align 4
  br label %out
out:
  ret void
}}

; A mover that took %slot (-> MOVING) moves thread %tid onto the CPU set %cpus: it saves the
; thread's set in the slot, sets %cpus, and publishes MOVED (Move.MOVED).  If the slot's thread
; went on meanwhile (RELEASED), the mover puts the saved set back and leaves the slot IDLE
; (Move.WENT_ON); if the thread cannot be moved, the slot goes back to %back (Move.FAILED).
define i32 @{MOVE}(ptr %slot, i32 %tid, ptr %cpus, i32 %back) {{
entry:
  %p.mask = call ptr @team.field(ptr %slot, i64 {_MASK})
  %got = call i32 @sched_getaffinity(i32 %tid, i64 {CPU_SET_BYTES}, ptr %p.mask)
  %got.ok = icmp eq i32 %got, 0
  br i1 %got.ok, label %pin, label %fail
pin:
  %set = call i32 @sched_setaffinity(i32 %tid, i64 {CPU_SET_BYTES}, ptr %cpus)
  %set.ok = icmp eq i32 %set, 0
  br i1 %set.ok, label %publish, label %fail
publish:
  %p.moved = call ptr @team.field(ptr %slot, i64 {_MOVED_TID})
  store i32 %tid, ptr %p.moved
  %pair = cmpxchg ptr %slot, i32 {s.MOVING}, i32 {s.MOVED} release monotonic
  %ok = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %ok, label %moved, label %went.on
moved:
  ret i32 {int(Move.MOVED)}
went.on:                                ; RELEASED: the thread is past its chunk
  %back.set = call i32 @sched_setaffinity(i32 %tid, i64 {CPU_SET_BYTES}, ptr %p.mask)
  store atomic i32 {s.IDLE}, ptr %slot release, align 4
  ret i32 {int(Move.WENT_ON)}
fail:
  call void @team.put_back(ptr %slot, i32 %back)
  ret i32 {int(Move.FAILED)}
}}

; The master (thread 0) with no chunk left: each team thread still ABSENT GRACE_NS after the
; master entered the loop is moved onto the master's CPU (%mine: scratch for the CPU set), and
; the master yields to it; returns once no slot is absent and not yet due.
define internal void @team.fetch(ptr %team, i32 %m, ptr %own, ptr %mine) {{
entry:
  %p.joined = call ptr @team.field(ptr %own, i64 {_JOINED})
  %start = load i64, ptr %p.joined
  %cpu = call i32 @team.cpu()
  %cpu.ok = icmp sge i32 %cpu, 0
  br i1 %cpu.ok, label %setup, label %out
setup:
  %self = call i32 @gettid()
  %pid = call i32 @getpid()
  call void @team.one_cpu(ptr %mine, i32 %cpu)
  br label %pass
pass:                                   ; one look at slots 1 .. m-1
  %moved.any = phi i1 [ false, %setup ], [ %moved.next, %relax ]
  br label %loop
loop:
  %j = phi i32 [ 1, %pass ], [ %j.next, %next ]
  %waiting = phi i1 [ false, %pass ], [ %waiting.next, %next ]
  %moved = phi i1 [ %moved.any, %pass ], [ %moved.j, %next ]
  %more = icmp slt i32 %j, %m
  br i1 %more, label %look, label %passed
look:
  %slot = call ptr @team.slot(ptr %team, i32 %j)
  %st = load atomic i32, ptr %slot acquire, align 4
  %absent = icmp eq i32 %st, {s.ABSENT}
  br i1 %absent, label %due.check, label %skip
due.check:
  %now = call i64 @team.now()
  %age = sub i64 %now, %start
  %due = icmp sgt i64 %age, {GRACE_NS}
  br i1 %due, label %take, label %pending
take:
  %pair = cmpxchg ptr %slot, i32 {s.ABSENT}, i32 {s.MOVING} acquire monotonic
  %won = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %won, label %which, label %skip
which:                                  ; the thread this slot's thread was last time
  %jw = sext i32 %j to i64
  %p.tid.j = getelementptr inbounds [{MAX_SLOTS} x i64], ptr @{TIDS}, i64 0, i64 %jw
  %entry.v = load atomic i64, ptr %p.tid.j monotonic, align 8
  %tid = trunc i64 %entry.v to i32
  %led.w = lshr i64 %entry.v, 32
  %led = trunc i64 %led.w to i32
  %known = icmp sgt i32 %tid, 0
  %other = icmp ne i32 %tid, %self
  %mine.team = icmp eq i32 %led, %self    ; it entered a team this thread led
  %usable.1 = and i1 %known, %other
  %usable = and i1 %usable.1, %mine.team
  br i1 %usable, label %ours.check, label %give.up
ours.check:                             ; a thread of this process (signal 0 only checks)
  %alive = call i32 @tgkill(i32 %pid, i32 %tid, i32 0)
  %ours = icmp eq i32 %alive, 0
  br i1 %ours, label %move, label %give.up
move:                                   ; (an ABSENT slot it fails to move is not waited for)
  %how = call i32 @{MOVE}(ptr %slot, i32 %tid, ptr %mine, i32 {s.ABSENT})
  %done.move = icmp eq i32 %how, {int(Move.MOVED)}
  br i1 %done.move, label %pinned, label %skip
pinned:
  %counted = atomicrmw add ptr @{LATE}, i64 1 monotonic
  br label %next
give.up:                                ; left ABSENT, and not waited for any more here
  call void @team.put_back(ptr %slot, i32 {s.ABSENT})
  br label %skip
pending:
  br label %next
skip:
  br label %next
next:
  %waiting.next = phi i1 [ %waiting, %skip ], [ true, %pending ], [ %waiting, %pinned ]
  %moved.j = phi i1 [ %moved, %skip ], [ %moved, %pending ], [ true, %pinned ]
  %j.next = add i32 %j, 1
  br label %loop
passed:
  %moved.next = phi i1 [ %moved, %loop ]
  br i1 %waiting, label %relax, label %done
relax:
  {relax}
  br label %pass
done:
  br i1 %moved.next, label %yield, label %out
yield:                                  ; let the moved threads run on this CPU now
  %y = call i32 @sched_yield()
  br label %out
out:
  ret void
}}

; One look at the others' slots: 0 if none is working, 1 if one is (none moved), 2 if this
; thread moved one onto its CPU or gave up.  A chunk's age is counted from when this thread
; first saw it (%seen: the chunk number and time per slot), which needs no clock in the
; chunks themselves; %rate: this thread's own ns per iteration.  A thread whose chunk started
; on this thread's CPU is not watched: it cannot be running while this one is, and waiting for
; it here would only keep it off its core.
define internal i32 @team.scan(ptr %team, i32 %me, i32 %m, i64 %now, i64 %rate, i32 %cpu,
                               ptr %mine, ptr %seen) {{
entry:
  br label %loop
loop:
  %j = phi i32 [ 0, %entry ], [ %j.next, %next ]
  %busy = phi i32 [ 0, %entry ], [ %busy.next, %next ]
  %more = icmp slt i32 %j, %m
  br i1 %more, label %look, label %end
look:
  %other = icmp ne i32 %j, %me
  br i1 %other, label %state, label %skip
state:
  %slot = call ptr @team.slot(ptr %team, i32 %j)
  %st = load atomic i32, ptr %slot acquire, align 4
  %working = icmp eq i32 %st, {s.WORKING}
  br i1 %working, label %where, label %skip
where:
  %p.cpu = call ptr @team.field(ptr %slot, i64 {_CPU})
  %its.cpu = load atomic i32, ptr %p.cpu monotonic, align 4
  %here = icmp eq i32 %its.cpu, %cpu
  br i1 %here, label %skip, label %age
age:
  %p.seq = call ptr @team.field(ptr %slot, i64 {_SEQ})
  %seq = load atomic i32, ptr %p.seq monotonic, align 4
  %p.span = call ptr @team.field(ptr %slot, i64 {_SPAN})
  %span = load atomic i64, ptr %p.span monotonic, align 8
  %jw = sext i32 %j to i64
  %p.seen = getelementptr inbounds {{ i64, i64 }}, ptr %seen, i64 %jw, i32 0
  %p.seen.at = getelementptr inbounds {{ i64, i64 }}, ptr %seen, i64 %jw, i32 1
  %seen.seq = load i64, ptr %p.seen
  %seq.w = zext i32 %seq to i64
  %same = icmp eq i64 %seen.seq, %seq.w
  br i1 %same, label %judge, label %first
first:                                  ; a chunk not seen before: its age starts now
  store i64 %seq.w, ptr %p.seen
  store i64 %now, ptr %p.seen.at
  br label %counted
judge:
  %seen.at = load i64, ptr %p.seen.at
  %expect = mul i64 %rate, %span
  %twice = shl i64 %expect, 1
  %limit = add i64 %twice, {GRACE_NS}
  %aged = sub i64 %now, %seen.at
  %late = icmp sgt i64 %aged, %limit
  br i1 %late, label %take, label %counted
take:
  %pair = cmpxchg ptr %slot, i32 {s.WORKING}, i32 {s.MOVING} acquire monotonic
  %won = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %won, label %move, label %skip
move:
  %p.tid = call ptr @team.field(ptr %slot, i64 {_TID})
  %tid = load i32, ptr %p.tid
  call void @team.one_cpu(ptr %mine, i32 %cpu)
  %how = call i32 @{MOVE}(ptr %slot, i32 %tid, ptr %mine, i32 {s.WORKING})
  %done.move = icmp eq i32 %how, {int(Move.MOVED)}
  br i1 %done.move, label %pinned, label %gave.up
pinned:
  %counted.move = atomicrmw add ptr @{MOVES}, i64 1 monotonic
  %y = call i32 @sched_yield()
  ret i32 2
gave.up:
  ret i32 2
counted:
  br label %next
skip:
  br label %next
next:
  %busy.next = phi i32 [ 1, %counted ], [ %busy, %skip ]
  %j.next = add i32 %j, 1
  br label %loop
end:
  ret i32 %busy
}}

define void @{LEAVE}(ptr %team, i32 %me, i32 %n) {{
entry:
  %mine = alloca [{CPU_SET_BYTES} x i8]
  %seen = alloca [{MAX_SLOTS} x {{ i64, i64 }}]
  %slot = call ptr @team.own(ptr %team, i32 %me)
  %in = icmp ne ptr %slot, null
  br i1 %in, label %settle, label %out
settle:                                 ; this thread's last chunk is over
  call void @team.idle(ptr %slot, i32 {s.WORKING})
  %few = icmp slt i32 %n, {MAX_SLOTS}
  %m = select i1 %few, i32 %n, i32 {MAX_SLOTS}
  %others = icmp sgt i32 %m, 1
  br i1 %others, label %rate, label %finish
rate:
  %p.done = call ptr @team.field(ptr %slot, i64 {_DONE})
  %done = load i64, ptr %p.done
  %worked = icmp sgt i64 %done, 0
  br i1 %worked, label %where, label %late
where:
  %p.joined = call ptr @team.field(ptr %slot, i64 {_JOINED})
  %joined = load i64, ptr %p.joined
  %t0 = call i64 @team.now()
  %spent = sub i64 %t0, %joined
  %rate.v = sdiv i64 %spent, %done
  %cpu = call i32 @team.cpu()
  %cpu.ok = icmp sge i32 %cpu, 0
  br i1 %cpu.ok, label %watch, label %late
watch:
  ; no chunk number is -1 (they are 32-bit): every chunk is new at first sight
  call void @llvm.memset.p0.i64(ptr %seen, i8 -1, i64 {MAX_SLOTS * 16}, i1 false)
  br label %poll
poll:
  %now = call i64 @team.now()
  %r = call i32 @team.scan(ptr %team, i32 %me, i32 %m, i64 %now, i64 %rate.v, i32 %cpu,
                           ptr %mine, ptr %seen)
  %again = icmp eq i32 %r, 1
  br i1 %again, label %relax, label %late
relax:
  {relax}
  br label %poll
late:                                   ; the master fetches the team's latecomers
  %master = icmp eq i32 %me, 0
  br i1 %master, label %fetch, label %finish
fetch:
  call void @team.fetch(ptr %team, i32 %m, ptr %slot, ptr %mine)
  br label %finish
finish:
  call void @team.await_mover(ptr %slot)
  br label %out
out:
  ret void
}}

; A thread leaving the loop whose mover has yet to put its CPU set back (RELEASED) waits for
; it: so it leaves with the set it came with.  It spins SPIN_NS, then sleeps NAP_NS at a time,
; which lets a mover that was taken off this CPU run.
define internal void @team.await_mover(ptr %slot) {{
entry:
  %nap = alloca {{ i64, i64 }}
  %p.nap.ns = getelementptr inbounds {{ i64, i64 }}, ptr %nap, i32 0, i32 1
  store i64 0, ptr %nap
  store i64 {NAP_NS}, ptr %p.nap.ns
  %st0 = load atomic i32, ptr %slot acquire, align 4
  %pending0 = icmp eq i32 %st0, {s.RELEASED}
  br i1 %pending0, label %timed, label %out
timed:
  %t0 = call i64 @team.now()
  br label %spin
spin:
  {relax}
  %st = load atomic i32, ptr %slot acquire, align 4
  %pending = icmp eq i32 %st, {s.RELEASED}
  br i1 %pending, label %long.check, label %out
long.check:
  %now = call i64 @team.now()
  %spent = sub i64 %now, %t0
  %long = icmp sgt i64 %spent, {SPIN_NS}
  br i1 %long, label %sleep, label %spin
sleep:
  %rc = call i32 @nanosleep(ptr %nap, ptr null)
  br label %spin
out:
  ret void
}}
"""


_engine = None


def install():
    """JIT-compile the team's functions for the host once per process and register their
    addresses, which kernels' engines then resolve.  The caller holds the JIT lock."""
    global _engine
    if _engine is not None:
        return
    engine = host_engine(team_ir(Target.parse("llvm").is_x86))
    for name in SYMBOLS:
        llvm.add_symbol(name, engine.get_function_address(name))
    _engine = engine


def address(name: str) -> int:
    """The address of the team function *name* (one of :data:`SYMBOLS`) compiled for this
    process, installing it first; for tests, which call the handshake directly."""
    from .llvm import llvm_lock
    with llvm_lock:
        install()
        return _engine.get_function_address(name)


def tid_table():
    """The table of thread ids by slot (:data:`TIDS`: master << 32 | thread) of the
    JIT-compiled team, as a ctypes array, installing it first; for tests, which plant ids."""
    address(JOIN)
    return (ctypes.c_int64 * MAX_SLOTS).from_address(_engine.get_global_value_address(TIDS))


def latecomers() -> int:
    """How many team threads JIT-compiled kernels' masters have moved onto their CPU before
    the thread entered its loop, in this process (0 before :func:`install`)."""
    if _engine is None:
        return 0
    return ctypes.c_int64.from_address(_engine.get_global_value_address(LATE)).value


def moves() -> int:
    """How many threads JIT-compiled kernels' teams have moved onto a watcher's CPU in this
    process (0 before :func:`install`): what tests check, and what a user can look at."""
    if _engine is None:
        return 0
    return ctypes.c_int64.from_address(_engine.get_global_value_address(MOVES)).value
