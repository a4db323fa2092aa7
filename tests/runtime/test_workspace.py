"""Temporaries live in blocks kept across calls (einloop.runtime.workspace): reused by later
calls, never shared by two calls that run at once, and given back when a call fails."""
import threading

import numpy as np
import pytest

import einloop
from einloop import te
from einloop.runtime.workspace import ALIGNMENT, MAX_FREE, WorkspacePool


def test_a_block_given_back_is_taken_again():
    pool = WorkspacePool()
    a = pool.take(1000)
    assert a.address % ALIGNMENT == 0 and a.nbytes == 1000
    start = a.array.ctypes.data
    assert start <= a.address and a.address + 1000 <= start + a.array.nbytes
    pool.give(a)
    assert pool.take(800) is a               # large enough: reused
    pool.give(a)
    b = pool.take(5000)                      # too small: dropped for a new one
    assert b is not a and b.nbytes == 5000 and pool.kept_bytes == 0


def test_blocks_held_at_once_are_distinct_and_the_pool_keeps_a_few():
    pool = WorkspacePool()
    held = [pool.take(256) for _ in range(MAX_FREE + 2)]
    assert len({b.address for b in held}) == len(held)
    for b in held:
        pool.give(b)
    assert pool.kept_bytes == MAX_FREE * 256
    pool.clear()
    assert pool.kept_bytes == 0


def _kernel_with_a_temporary(n=4096):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")     # at root: a temporary of the kernel
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1, name="C")
    k = einloop.build(einloop.create_schedule(C.op), [A, C])
    assert k.temp_nbytes == (4 * n,)
    return k


def test_a_kernels_calls_reuse_one_block():
    k = _kernel_with_a_temporary()
    a = np.arange(4096, dtype=np.float32)
    c = np.empty_like(a)
    k(a, c)
    first = k._workspaces.take(0)
    k._workspaces.give(first)
    for _ in range(3):
        k(a, c)
        k.call_addresses([a.ctypes.data, c.ctypes.data])
    np.testing.assert_array_equal(c, a[::-1] * 2 + 1)
    assert k._workspaces.take(0) is first
    k.release_workspace()
    assert k._workspaces.kept_bytes == 0


def test_calls_from_several_threads_at_once_each_get_their_own_temporaries():
    k = _kernel_with_a_temporary()
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            a = rng.standard_normal(4096).astype(np.float32)
            c = np.empty_like(a)
            k(a, c)
            if not np.array_equal(c, a[::-1] * 2 + 1):
                errors.append(seed)
                return

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert 0 < k._workspaces.kept_bytes <= MAX_FREE * 4 * 4096


def test_a_block_that_cannot_be_allocated_is_a_clear_error():
    k = _kernel_with_a_temporary()

    def refuse(nbytes):
        raise MemoryError("refused for the test")
    k._workspaces.take = refuse
    with pytest.raises(einloop.KernelRuntimeError,
                       match=r"cannot allocate its temporary buffer B \(float32\[4096\], 16384 "
                             r"bytes\): refused for the test"):
        k(np.zeros(4096, np.float32), np.zeros(4096, np.float32))
