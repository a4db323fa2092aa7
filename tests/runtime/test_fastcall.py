"""The generated NumPy fast path of a kernel call decides exactly as the general path does: every
argument variant either runs with the same result on both or raises the same error on both."""
import numpy as np
import pytest

from einloop import ArgumentError, build, create_schedule, te
from einloop.runtime.fastcall import make_fast_call


def _axpy():
    """Out = A + 2 B over (3, 5); two inputs, one output: overlap checks between all three."""
    A = te.placeholder((3, 5), name="A")
    B = te.placeholder((3, 5), name="B")
    O = te.compute((3, 5), lambda i, j: A[i, j] + 2.0 * B[i, j], name="O")
    s = create_schedule(O)
    s[O].parallel(O.op.axis[0])
    return build(s, [A, B, O])


class Sub(np.ndarray):
    pass


class CountingDLPack:
    """An array that only speaks DLPack and counts how often it is asked."""

    def __init__(self, array):
        self.array, self.exports = array, 0

    def __dlpack__(self, **kwargs):
        self.exports += 1
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _variants():
    """(label, make) pairs: make() returns fresh arguments (a, b, out)."""
    f32 = np.float32

    def base():
        return (np.arange(15, dtype=f32).reshape(3, 5), np.ones((3, 5), f32),
                np.zeros((3, 5), f32))

    def replace(i, value_of):
        def make():
            args = list(base())
            args[i] = value_of(args)
            return tuple(args)
        return make

    big = np.zeros((4, 5), np.float32)
    return [
        ("plain", base),
        ("float64 input", replace(0, lambda a: a[0].astype(np.float64))),
        ("big-endian input", replace(0, lambda a: a[0].astype(">f4"))),
        ("equal dtype object", replace(0, lambda a: a[0].view(np.dtype("<f4")))),
        ("wrong shape", replace(1, lambda a: np.ones((5, 3), np.float32))),
        ("Fortran order", replace(1, lambda a: np.asfortranarray(a[1]))),
        ("strided view", replace(1, lambda a: np.ones((3, 10), np.float32)[:, ::2])),
        ("read-only output", replace(2, lambda a: np.frombuffer(bytes(60), np.float32)
                                     .reshape(3, 5))),
        ("read-only input", replace(0, lambda a: np.frombuffer(a[0].tobytes(), np.float32)
                                    .reshape(3, 5))),
        ("subclass", replace(0, lambda a: a[0].view(Sub))),
        ("output is input", replace(2, lambda a: a[0])),
        ("inputs alias", replace(1, lambda a: a[0])),
        ("output overlaps input", replace(2, lambda a: big[1:])),
        ("DLPack input", replace(0, lambda a: CountingDLPack(a[0]))),
        ("DLPack output", replace(2, lambda a: CountingDLPack(a[2]))),
        ("strided DLPack output", replace(2, lambda a: CountingDLPack(
            np.zeros((3, 10), np.float32)[:, ::2]))),
        ("read-only DLPack output", replace(2, lambda a: CountingDLPack(
            np.frombuffer(bytes(60), np.float32).reshape(3, 5)))),
        ("float64 DLPack input", replace(0, lambda a: CountingDLPack(a[0].astype(np.float64)))),
        ("list", replace(0, lambda a: a[0].tolist())),
        ("scalar", replace(0, lambda a: np.float32(1))),
    ], big


@pytest.fixture(scope="module")
def kernel():
    return _axpy()


def _outcome(call, args):
    try:
        call(args)
    except ArgumentError as exc:
        return "error", str(exc)
    out = args[2].array if isinstance(args[2], CountingDLPack) else args[2]
    return "ran", out.copy()


def test_fast_and_general_paths_agree_on_every_variant(kernel):
    variants, big = _variants()
    seen = set()
    for label, make in variants:
        big[:] = 5.0                                    # the overlapping variant's input
        fast = _outcome(kernel._fast_call, make())
        big[:] = 5.0
        general = _outcome(kernel._call_general, make())
        assert fast[0] == general[0], label
        if fast[0] == "error":
            assert fast[1] == general[1], label
        else:
            np.testing.assert_array_equal(fast[1], general[1], err_msg=label)
        seen.add(fast[0])
    assert seen == {"ran", "error"}


def test_the_fast_path_runs_the_code_with_the_right_values(kernel):
    a, b = np.arange(15, dtype=np.float32).reshape(3, 5), np.full((3, 5), 0.5, np.float32)
    out = np.zeros((3, 5), np.float32)
    kernel(a, b, out)
    np.testing.assert_array_equal(out, a + 1.0)


def test_wrong_argument_counts_reach_the_general_error(kernel):
    with pytest.raises(ArgumentError, match=r"takes 3 arrays .* got 2"):
        kernel(np.zeros((3, 5), np.float32), np.zeros((3, 5), np.float32))


def test_generated_source_is_straight_line_and_checks_each_argument(kernel):
    source = kernel._fast_call.source
    assert "for " not in source and "while " not in source
    for i in range(3):
        assert f"a{i}.shape == s{i}" in source
    # the written argument is tested for overlap with both inputs
    assert source.count("p2 <") == 2


def test_without_the_data_offset_the_path_asks_numpy_for_addresses(kernel):
    call = make_fast_call(kernel, kernel._params, kernel._pairs, False, kernel._cfunc,
                          True, None)
    a, b = np.ones((3, 5), np.float32), np.ones((3, 5), np.float32)
    out = np.zeros((3, 5), np.float32)
    call((a, b, out))
    np.testing.assert_array_equal(out, 3.0)
    assert ".ctypes.data" in call.source


def test_dlpack_arguments_take_the_fast_path_once_each(kernel):
    """A fitting DLPack argument is exported exactly once per call (the general path would ask
    again), and the kernel writes through to the producer's memory."""
    a, b = np.arange(15, dtype=np.float32).reshape(3, 5), np.ones((3, 5), np.float32)
    out = np.zeros((3, 5), np.float32)
    args = [CountingDLPack(x) for x in (a, b, out)]
    kernel(*args)
    np.testing.assert_array_equal(out, a + 2.0)
    assert [x.exports for x in args] == [1, 1, 1]
    # a DLPack output that overlaps an input is still refused (by the general path)
    with pytest.raises(ArgumentError, match="shares memory"):
        kernel(CountingDLPack(a), b, CountingDLPack(a))
