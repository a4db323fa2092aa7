"""The runtime's Kernel over native code that no compiler made (a ctypes callback)."""
import numpy as np
import pytest

from einloop.errors import ArgumentError, BuildError, KernelRuntimeError
from einloop.runtime import SourceFormat, Timing
from native_stub import N, SIGNATURE, stub_kernel


def test_call_checks_and_temps():
    k = stub_kernel()
    a, b = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    k(a, b)
    np.testing.assert_array_equal(b, 2 * a)
    temp, threads = k.owner.calls[-1]
    assert temp and threads == 1                   # a serial kernel is told one thread
    assert repr(k) == "<einloop.Kernel double(A: float32[4], B: float32[4])>"
    assert k.signature is SIGNATURE and k.metadata["target"] == "stub" and not k.parallel
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): expected shape \(4,\)"):
        k(a, np.zeros(5, np.float32))
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\): the kernel writes this array "
                                            r"but it shares memory with argument 0 \(A\)"):
        k(a, a)
    with pytest.raises(TypeError):
        k.metadata["target"] = "other"


def test_parallel_kernels_get_num_threads():
    k = stub_kernel(parallel=True)
    k.num_threads = 3
    k(np.ones(N, np.float32), np.zeros(N, np.float32))
    assert k.owner.calls[-1][1] == 3


def test_a_nonzero_status_is_a_kernel_runtime_error():
    k = stub_kernel(status=1)
    with pytest.raises(KernelRuntimeError, match="kernel double: a local buffer could not be "
                                                 "allocated"):
        k(np.ones(N, np.float32), np.zeros(N, np.float32))


def test_sources_given_and_missing():
    k = stub_kernel()
    assert k.get_source("ir") == k.get_source(SourceFormat.IR) == "for i in range(4): B[i] = 2*A[i]"
    with pytest.raises(BuildError, match=r"kernel double was made without its 'asm' source "
                                         r"\(available: 'ir'\)"):
        k.get_source("asm")
    with pytest.raises(BuildError, match="unknown source format 'c'"):
        k.get_source("c")


def test_time():
    k = stub_kernel()
    t = k.time(np.ones(N, np.float32), np.zeros(N, np.float32), number=3, repeat=2)
    assert isinstance(t, Timing) and t.number == 3 and len(k.owner.calls) == 1 + 3 * 2
