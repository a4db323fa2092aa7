"""Kernels take any array exporting DLPack or the array interface, without copying."""
import numpy as np
import pytest

from dlpack_objects import SHAPE, DLPackOnly, twice_plus_one
from einloop import ArgumentError


@pytest.fixture(scope="module")
def kernel():
    return twice_plus_one()


class InterfaceOnly:
    """Exports a NumPy array through ``__array_interface__`` only."""

    def __init__(self, array, readonly=False):
        self.array = array
        self.__array_interface__ = dict(array.__array_interface__)
        self.__array_interface__["data"] = (array.ctypes.data, readonly)


def data():
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)


def test_from_dlpack_round_trip_writes_the_original(kernel):
    a, out = data(), np.zeros(SHAPE, np.float32)
    view = np.from_dlpack(out)
    assert np.shares_memory(view, out)
    kernel(np.from_dlpack(a), view)
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_dlpack_only_objects_are_viewed_and_written_in_place(kernel):
    a, out = data(), np.zeros(SHAPE, np.float32)
    kernel(DLPackOnly(a), DLPackOnly(out))
    np.testing.assert_array_equal(out, a * 2 + 1)
    out[:] = 0
    kernel(a, DLPackOnly(out))                    # mixed with a NumPy array
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_kernel_time_takes_dlpack_objects(kernel):
    out = np.zeros(SHAPE, np.float32)
    kernel.time(DLPackOnly(data()), DLPackOnly(out), number=2, repeat=1)
    np.testing.assert_array_equal(out, data() * 2 + 1)


def test_array_interface_objects_are_accepted(kernel):
    a, out = data(), np.zeros(SHAPE, np.float32)
    kernel(InterfaceOnly(a), InterfaceOnly(out))
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_read_only_array_interface_output_is_refused(kernel):
    out = np.zeros(SHAPE, np.float32)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\), a InterfaceOnly .*read-only"):
        kernel(data(), InterfaceOnly(out, readonly=True))
    assert not out.any()


@pytest.mark.parametrize("device, name", [((2, 0), "CUDA device 0"), ((10, 3), "ROCm device 3"),
                                          ((99, 1), "non-CPU device 1")])
def test_other_devices_are_refused_by_name(kernel, device, name):
    with pytest.raises(ArgumentError, match=rf"argument 0 \(A\): the DLPackOnly lives on {name} "
                                            r"\(DLPack device type \d+\).*tensor.cpu\(\)"):
        kernel(DLPackOnly(data(), device), np.zeros(SHAPE, np.float32))


def test_non_contiguous_dlpack_tensor_is_refused_not_copied(kernel):
    wide = np.zeros((4, 12), np.float32)
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\), a DLPackOnly viewed without "
                                            r"copying: the array is not C-contiguous.*"
                                            r"contiguous\(\)"):
        kernel(data(), DLPackOnly(wide[:, ::2]))
    assert not wide.any()
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        kernel(DLPackOnly(data().T.copy().T), np.zeros(SHAPE, np.float32))


def test_dlpack_shape_and_dtype_are_checked(kernel):
    out = np.zeros(SHAPE, np.float32)
    with pytest.raises(ArgumentError, match=r"expected shape \(4, 6\), got \(6, 4\)"):
        kernel(DLPackOnly(data().reshape(6, 4)), out)
    with pytest.raises(ArgumentError, match="expected dtype float32, got float64"):
        kernel(DLPackOnly(data().astype(np.float64)), out)


def test_dlpack_output_sharing_an_input_is_refused(kernel):
    a = data()
    with pytest.raises(ArgumentError, match="shares memory with argument 0"):
        kernel(DLPackOnly(a), DLPackOnly(a))


def test_objects_without_an_array_protocol_are_refused(kernel):
    for value in (data().tolist(), np.float32(1)):
        with pytest.raises(ArgumentError, match=r"expected a numpy.ndarray of float32\[4, 6\], "
                                                rf"got {type(value).__name__}$"):
            kernel(value, np.zeros(SHAPE, np.float32))


def test_torch_tensors(kernel):
    torch = pytest.importorskip("torch")
    a, out = torch.arange(24, dtype=torch.float32).reshape(SHAPE), torch.zeros(SHAPE)
    kernel(a, out)
    assert torch.equal(out, a * 2 + 1)
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        kernel(a, torch.zeros(SHAPE[::-1]).T)
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        kernel(torch.ones(4, 12)[:, ::2], out)
    with pytest.raises(ArgumentError, match=r"expected dtype float32, got float64 .*"
                                            r"tensor.to\(torch.float32\)"):
        kernel(a.double(), out)
    with pytest.raises(ArgumentError, match="require gradient"):
        kernel(torch.ones(SHAPE, requires_grad=True), out)
    # a view at an offset into its storage: the kernel writes rows 1.. of the base only
    base = torch.full((SHAPE[0] + 1, SHAPE[1]), -1.0)
    kernel(a, base[1:])
    assert torch.equal(base[1:], a * 2 + 1) and bool((base[0] == -1).all())


def test_a_read_only_dlpack_output_is_refused_and_left_alone(kernel):
    """NumPy exports a read-only array flagged READ_ONLY (versioned DLPack) and refuses it to
    legacy consumers: the kernel must not write it through either."""
    out = np.zeros(SHAPE, np.float32)
    out.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"argument 1 \(B\), a DLPackOnly viewed without "
                                            r"copying: the kernel writes this array but it is "
                                            r"read-only"):
        kernel(data(), DLPackOnly(out))
    assert not out.any()
    result = np.ones(SHAPE, np.float32)
    kernel(DLPackOnly(out), result)                             # as an input it is fine
    np.testing.assert_array_equal(result, 1.0)
