"""DLPack arguments read straight from the DLTensor (no NumPy view): the address, the checks and
the capsule's lifetime (the producer's deleter runs once per call, nothing leaks)."""
import ctypes
import sys

import numpy as np
import pytest

from dlpack_objects import SHAPE, DLPackOnly, twice_plus_one
from einloop import ArgumentError
from einloop.runtime import threads
from einloop.runtime.kernel import _dlpack_pointer

@pytest.fixture(scope="module")
def kernel():
    return twice_plus_one()


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class RawProducer:
    """A producer written against dlpack.h directly: NULL strides (compact row-major) and a
    nonzero byte_offset, which NumPy's own export never has.  It owns the struct (the capsule
    has no destructor and the DLManagedTensor no deleter)."""

    def __init__(self, base, offset_elems, shape):
        self.base = base
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.managed = _DLManaged()
        t = self.managed.dl_tensor
        t.data, t.device_type, t.ndim = base.ctypes.data, 1, len(shape)
        t.code, t.bits, t.lanes = 2, 32, 1
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = offset_elems * base.itemsize

    def __dlpack__(self, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p)
        return new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)


def test_address_is_read_from_the_dltensor(kernel):
    a = np.zeros(SHAPE, np.float32)
    found = _dlpack_pointer(kernel._params[0], DLPackOnly(a))
    assert found is not None and found[0] == a.ctypes.data


@pytest.mark.parametrize("make", [lambda: np.zeros((4, 12), np.float32)[:, ::2],
                                  lambda: np.zeros((6, 4), np.float32).T,
                                  lambda: np.zeros((6, 4), np.float32),
                                  lambda: np.zeros(SHAPE, np.float64),
                                  lambda: np.zeros(SHAPE, np.int32)])
def test_tensors_that_do_not_fit_take_the_checked_path(kernel, make):
    # strided, transposed, wrong shape, wrong dtypes: not read directly; _check explains why
    p = kernel._params[1]
    assert _dlpack_pointer(p, DLPackOnly(make())) is None
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\), a DLPackOnly viewed without"):
        kernel(np.zeros(SHAPE, np.float32), DLPackOnly(make()))


def test_null_strides_and_byte_offset(kernel):
    base = np.zeros(4 + 24, np.float32)
    a = np.arange(24, dtype=np.float32).reshape(SHAPE)
    producer = RawProducer(base, 4, SHAPE)
    assert _dlpack_pointer(kernel._params[1], producer)[0] == base.ctypes.data + 16
    kernel(a, producer)
    assert not base[:4].any()
    np.testing.assert_array_equal(base[4:].reshape(SHAPE), a * 2 + 1)


def test_misaligned_byte_offset_is_not_read_directly(kernel):
    base = np.zeros(32, np.float32)
    producer = RawProducer(base, 0, SHAPE)
    producer.managed.dl_tensor.byte_offset = 2              # half a float32
    assert _dlpack_pointer(kernel._params[1], producer) is None


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_many_calls_release_every_capsule(kernel):
    a, out = np.ones(SHAPE, np.float32), np.zeros(SHAPE, np.float32)
    da, dout = DLPackOnly(a), DLPackOnly(out)
    refs = sys.getrefcount(a), sys.getrefcount(out)
    for _ in range(2000):                   # warm up allocators
        kernel(da, dout)
    rss = _rss_bytes()
    for _ in range(100_000):
        kernel(da, dout)
    grown = _rss_bytes() - rss
    # NumPy's managed tensor holds a reference to the array until the deleter runs
    assert (sys.getrefcount(a), sys.getrefcount(out)) == refs
    assert grown < 2 << 20, f"resident memory grew by {grown} bytes over 100k calls"
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_kernel_time_keeps_capsules_for_its_calls(kernel):
    a, out = np.ones(SHAPE, np.float32), np.zeros(SHAPE, np.float32)
    refs = sys.getrefcount(a)
    kernel.time(DLPackOnly(a), DLPackOnly(out), number=3, repeat=2)
    np.testing.assert_array_equal(out, a * 2 + 1)
    assert sys.getrefcount(a) == refs


def test_thread_count_follows_the_environment(monkeypatch):
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "5")
    assert threads.default_num_threads() == 5
    monkeypatch.delenv("EINLOOP_NUM_THREADS")
    assert threads.default_num_threads() >= 1
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "-2")
    with pytest.raises(ArgumentError, match=r"positive integer, got '-2'"):
        threads.default_num_threads()


def test_a_null_shape_pointer_is_not_read(kernel):
    producer = RawProducer(np.zeros(24, np.float32), 0, SHAPE)
    producer.managed.dl_tensor.shape = None
    assert _dlpack_pointer(kernel._params[1], producer) is None
