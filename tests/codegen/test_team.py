"""The team handshake of parallel loops (einloop/codegen/team.py), called directly: a thread
held in its chunk is moved onto a watcher's CPU and gets its CPU set back when the chunk ends;
a team thread that has not entered the loop when the master is done is moved onto the master's
CPU and gets its CPU set back when it enters; a thread on time, or on the watcher's own CPU, is
left alone; a thread whose mover is held up goes on and gets its set back from the mover;
parallel kernels keep computing right."""
import ctypes
import os
import subprocess
import sys
import threading
import time

import llvmlite.binding as llvm
import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.codegen import team
from einloop.codegen.target import llvm_target

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the team handshake is Linux's")

VOID_P = ctypes.c_void_p
SIGNATURES = {team.RESET: (VOID_P, ctypes.c_int32),
              team.JOIN: (VOID_P, ctypes.c_int32),
              team.CHUNK: (VOID_P, ctypes.c_int32, ctypes.c_int64),
              team.CHUNK_DONE: (VOID_P, ctypes.c_int32),
              team.LEAVE: (VOID_P, ctypes.c_int32, ctypes.c_int32)}


def functions():
    return {name: ctypes.CFUNCTYPE(None, *args)(team.address(name))
            for name, args in SIGNATURES.items()}


def state(block, me):
    at = team.HEADER_BYTES + me * team.SLOT_BYTES
    return team.SlotState(ctypes.c_int32.from_buffer(block, at).value)


class HeldThread(threading.Thread):
    """Team member 1: joins, starts a chunk of *span* iterations (on one of *cpus*, its CPU
    set meanwhile), and ends it (its last) only when released: a thread the OS took off its
    core, as far as the others can tell.  Then it leaves, one of a team of *n*."""

    def __init__(self, fns, block, span=1, cpus=None, n=1):
        super().__init__(daemon=True)
        self.fns, self.block, self.span, self.cpus, self.n = fns, block, span, cpus, n
        self.started, self.release, self.ended = (threading.Event() for _ in range(3))
        self.cpus_in_chunk = self.cpus_after = None

    def run(self):
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)
        ptr = ctypes.addressof(self.block)
        self.fns[team.JOIN](ptr, 1)
        self.fns[team.CHUNK](ptr, 1, self.span)
        self.started.set()
        self.release.wait(30)
        self.cpus_in_chunk = os.sched_getaffinity(0)
        self.fns[team.CHUNK_DONE](ptr, 1)
        self.fns[team.LEAVE](ptr, 1, self.n)   # its last chunk (a team of one: no watching)
        self.cpus_after = os.sched_getaffinity(0)
        self.ended.set()


def team_of_two(cpus=None, n=1):
    """A team block of two slots, its member 1 a :class:`HeldThread` inside its chunk, and
    the watcher (this thread, member 0) joined: ``(functions, block, its address, held)``."""
    fns, block = functions(), ctypes.create_string_buffer(team.TEAM_BYTES)
    ptr = ctypes.addressof(block)
    fns[team.RESET](ptr, 2)
    held = HeldThread(fns, block, cpus=cpus, n=n)
    held.start()
    assert held.started.wait(30)
    fns[team.JOIN](ptr, 0)
    return fns, block, ptr, held


@pytest.fixture
def two_cpus():
    """``(the watcher's CPU, the other CPUs)``: this thread runs on one CPU of its set for the
    test, and a held thread is put on the others (so that it started its chunk elsewhere)."""
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("needs two CPUs: a watcher and a held thread on CPUs of their own")
    mine = min(before)
    os.sched_setaffinity(0, {mine})
    try:
        yield mine, before - {mine}
    finally:
        os.sched_setaffinity(0, before)


def test_a_watcher_moves_a_thread_held_in_its_chunk_which_gets_its_cpus_back(two_cpus):
    mine, others = two_cpus
    moved = team.moves()
    fns, block, ptr, held = team_of_two(others)     # the watcher: one quick chunk, so its rate
    fns[team.CHUNK](ptr, 0, 1)                      # predicts microseconds for the held one
    fns[team.CHUNK_DONE](ptr, 0)
    fns[team.LEAVE](ptr, 0, 2)                      # returns once it moved the held thread
    assert team.moves() == moved + 1
    assert state(block, 1) is team.SlotState.MOVED
    held.release.set()
    assert held.ended.wait(30)
    assert held.cpus_in_chunk == {mine}             # it ran its chunk on the watcher's CPU
    assert held.cpus_after == others                # and left with the CPU set it came with
    assert state(block, 1) is team.SlotState.IDLE
    assert os.sched_getaffinity(0) == {mine}        # the watcher's own set is untouched


def test_a_watcher_leaves_a_thread_whose_chunk_started_on_its_own_cpu(two_cpus):
    """That thread cannot run while the watcher does: the watcher leaves at once."""
    mine, _ = two_cpus
    moved = team.moves()
    fns, block, ptr, held = team_of_two({mine})
    fns[team.CHUNK](ptr, 0, 1)
    fns[team.CHUNK_DONE](ptr, 0)
    fns[team.LEAVE](ptr, 0, 2)                      # returns without waiting or moving
    assert team.moves() == moved
    assert state(block, 1) is team.SlotState.WORKING
    held.release.set()
    assert held.ended.wait(30)
    assert held.cpus_in_chunk == held.cpus_after == {mine}


def test_a_thread_does_not_wait_for_a_held_up_mover_which_puts_its_cpus_back(two_cpus):
    """A mover took the slot (MOVING) and the OS took the mover off its core before it could
    move the thread: the thread's chunk ends without waiting (RELEASED), and when it leaves
    the loop it waits for the mover, which finds it gone on and puts its CPU set back."""
    mine, others = two_cpus
    fns, block, ptr, held = team_of_two(others, n=2)
    slot = team.HEADER_BYTES + team.SLOT_BYTES
    ctypes.c_int32.from_buffer(block, slot).value = team.SlotState.MOVING   # the mover's take
    held.release.set()
    time.sleep(0.2)
    assert state(block, 1) is team.SlotState.RELEASED
    assert not held.ended.is_set()                  # it leaves only after the mover is done
    move = ctypes.CFUNCTYPE(ctypes.c_int32, VOID_P, ctypes.c_int32, VOID_P, ctypes.c_int32)(
        team.address(team.MOVE))
    one_cpu = ctypes.create_string_buffer(team.CPU_SET_BYTES)
    one_cpu[mine // 8] = 1 << mine % 8
    how = move(ctypes.addressof(block) + slot, held.native_id, ctypes.addressof(one_cpu),
               team.SlotState.WORKING)
    assert team.Move(how) is team.Move.WENT_ON
    assert held.ended.wait(30)
    assert held.cpus_in_chunk == held.cpus_after == others
    assert state(block, 1) is team.SlotState.IDLE


class Latecomer(threading.Thread):
    """Team member 1 of a later loop: it entered an earlier one that this thread set up (so
    the table holds its thread id, in a team this thread led), and enters the loop of *block*
    only when released."""

    def __init__(self, fns):
        super().__init__(daemon=True)
        self.fns = fns
        self.earlier = ctypes.create_string_buffer(team.TEAM_BYTES)
        fns[team.RESET](ctypes.addressof(self.earlier), 2)
        self.block = None
        self.known, self.release, self.ended = (threading.Event() for _ in range(3))
        self.cpus_after = None

    def run(self):
        self.fns[team.JOIN](ctypes.addressof(self.earlier), 1)
        self.known.set()
        self.release.wait(30)
        ptr = ctypes.addressof(self.block)
        self.fns[team.JOIN](ptr, 1)                 # enters: puts back its CPU set
        self.fns[team.LEAVE](ptr, 1, 2)             # no chunk left for it
        self.cpus_after = os.sched_getaffinity(0)
        self.ended.set()


def test_the_master_fetches_a_thread_that_has_not_entered_which_gets_its_cpus_back():
    before = os.sched_getaffinity(0)
    fns = functions()
    late = Latecomer(fns)
    late.start()
    assert late.known.wait(30)
    assert team.tid_table()[1] == threading.get_native_id() << 32 | late.native_id
    block = ctypes.create_string_buffer(team.TEAM_BYTES)
    ptr = ctypes.addressof(block)
    fns[team.RESET](ptr, 2)
    late.block = block
    assert state(block, 1) is team.SlotState.ABSENT
    fetched, moved = team.latecomers(), team.moves()
    fns[team.JOIN](ptr, 0)
    fns[team.CHUNK](ptr, 0, 8)                      # the master runs every chunk
    fns[team.CHUNK_DONE](ptr, 0)
    fns[team.LEAVE](ptr, 0, 2)                      # returns once it moved the latecomer
    assert team.latecomers() == fetched + 1
    assert team.moves() == moved                    # nobody was held in a chunk
    assert state(block, 1) is team.SlotState.MOVED
    pinned = os.sched_getaffinity(late.native_id)
    assert len(pinned) == 1 and pinned <= before    # onto the master's CPU
    late.release.set()
    assert late.ended.wait(30)
    assert late.cpus_after == before                # it took back the set it had
    assert state(block, 1) is team.SlotState.IDLE


def test_the_master_moves_no_thread_whose_id_is_not_of_this_process_or_team():
    """The table may be stale (a pool that started new threads), or hold a thread of a team
    another thread led at the same time: an id that names no thread of this process, or one
    that entered another master's team, is never moved, and the master stops waiting for
    that slot."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    helper = threading.Thread(target=threading.Event().wait, args=(30,), daemon=True)
    helper.start()
    try:
        before = os.sched_getaffinity(other.pid)
        helper_before = os.sched_getaffinity(helper.native_id)
        fns = functions()
        table = team.tid_table()
        block = ctypes.create_string_buffer(team.TEAM_BYTES)
        ptr = ctypes.addressof(block)
        fetched = team.latecomers()
        me = threading.get_native_id()
        for planted in (me << 32 | other.pid, me << 32, me << 32 | me,
                        other.pid << 32 | helper.native_id):   # another master's team
            table[1] = planted
            fns[team.RESET](ptr, 2)
            fns[team.JOIN](ptr, 0)
            fns[team.LEAVE](ptr, 0, 2)              # returns: nobody to fetch
            assert state(block, 1) is team.SlotState.ABSENT
        assert team.latecomers() == fetched
        assert os.sched_getaffinity(other.pid) == before
        assert os.sched_getaffinity(helper.native_id) == helper_before
        assert os.sched_getaffinity(0) == before
    finally:
        other.kill()
        other.wait()


def test_a_watcher_leaves_a_thread_that_ends_its_chunk_on_time():
    fns, block, ptr, held = team_of_two()
    time.sleep(0.2)                                 # the watcher's rate: 0.2 s per iteration,
    fns[team.CHUNK](ptr, 0, 1)                      # so the held thread has 0.4 s to finish
    fns[team.CHUNK_DONE](ptr, 0)
    moved = team.moves()
    threading.Timer(0.02, held.release.set).start()
    fetched = team.latecomers()
    fns[team.LEAVE](ptr, 0, 2)                      # waits until the held chunk has ended
    assert held.ended.wait(30)
    assert team.moves() == moved
    assert team.latecomers() == fetched             # it had entered: not a latecomer
    assert held.cpus_in_chunk == held.cpus_after == os.sched_getaffinity(0)


def test_a_thread_that_did_no_work_or_is_alone_does_not_watch():
    fns, block, ptr, held = team_of_two()
    moved = team.moves()
    fns[team.LEAVE](ptr, 0, 2)                      # no chunk done: no rate to judge by
    fns[team.LEAVE](ptr, 0, 1)                      # a team of one has no one to watch
    fns[team.LEAVE](ptr, team.MAX_SLOTS, 2)         # a thread beyond the slots takes no part
    assert team.moves() == moved
    held.release.set()
    assert held.ended.wait(30)


def test_the_team_code_compiles_for_linux_targets_without_x86():
    """Exported libraries carry the team's code for their target: it must build for aarch64
    (no ``pause``) as for x86-64."""
    for x86, triple in ((True, "x86_64-unknown-linux-gnu"), (False, "aarch64-unknown-linux-gnu")):
        text = team.team_ir(x86)
        assert ("llvm.x86.sse2.pause" in text) == x86
        mod = llvm.parse_assembly(text)
        mod.triple = triple
        mod.verify()
        machine = llvm_target(triple).create_target_machine(opt=2, reloc="pic")
        assert machine.emit_object(mod)[:4] == b"\x7fELF"


def test_parallel_kernels_call_the_team_on_linux_only():
    X = te.placeholder((256, 64), name="X")
    Y = te.compute((256, 64), lambda i, j: X[i, j] * 2.0, name="Y")
    s = create_schedule(Y)
    s[Y].parallel(s[Y].op.axis[0])
    linux = build(s, [X, Y], target="llvm -mtriple=x86_64-linux-gnu").get_source("llvm-unopt")
    for name in team.SYMBOLS:
        assert name in linux
    mac = build(s, [X, Y], target="llvm -mtriple=arm64-apple-macosx").get_source("llvm-unopt")
    assert "einloop_team" not in mac
    f = build(s, [X, Y])
    x = np.random.rand(256, 64).astype(np.float32)
    y = np.empty_like(x)
    for threads in (1, 2, 3, 7):
        f.num_threads = threads
        y.fill(np.nan)
        f(x, y)
        np.testing.assert_array_equal(y, x * 2)


def test_threads_without_a_slot_set_up_take_no_part_whatever_the_block_held():
    """A loop with no iterations resets no slot, and one run alone a single slot, while the
    thread numbers its threads see may be larger (a kernel called inside another library's
    OpenMP team): the block's stale bytes must never be read as a state to wait on."""
    fns = functions()
    for resets, me, n in ((0, 0, 1), (0, 0, 2), (1, 1, 2), (1, 3, 4)):
        stale = int(team.SlotState.MOVING).to_bytes(4, sys.byteorder) * (team.TEAM_BYTES // 4)
        block = ctypes.create_string_buffer(stale, team.TEAM_BYTES)
        ptr = ctypes.addressof(block)
        fns[team.RESET](ptr, resets)
        fns[team.JOIN](ptr, me)
        fns[team.CHUNK](ptr, me, 4)
        fns[team.CHUNK_DONE](ptr, me)
        fns[team.LEAVE](ptr, me, n)                 # returns: nothing to settle or watch
        if me >= resets:
            assert state(block, me) is team.SlotState.MOVING    # untouched


def test_parallel_loops_with_no_iterations_or_one_thread_return():
    n = te.var("n")                                 # may be 0: a loop with no iterations
    X = te.placeholder((n, 16), name="X")
    Y = te.compute((n, 16), lambda i, j: X[i, j] + 1.0, name="Y")
    s = create_schedule(Y)
    s[Y].parallel(s[Y].op.axis[0])
    f = build(s, [X, Y])
    for rows in (0, 1, 0, 5, 0, 64, 0):
        x = np.random.rand(rows, 16).astype(np.float32)
        y = np.full_like(x, np.nan)
        for threads in (1, 2):
            f.num_threads = threads
            f(x, y)
            np.testing.assert_array_equal(y, x + 1)
