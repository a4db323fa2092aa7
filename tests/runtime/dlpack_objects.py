"""What the DLPack tests share: a small kernel (B = 2 A + 1) and an array that speaks DLPack only."""
import ctypes

from einloop import build, create_schedule, te

SHAPE = (4, 6)


def twice_plus_one(shape=SHAPE):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return build(create_schedule(B), [A, B])


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, (ctypes.py_object,
                                                                         ctypes.c_char_p)


class DLPackOnly:
    """Exports a NumPy array through DLPack and nothing else (as a foreign tensor would); the
    device it reports may be overridden (a fake GPU tensor: its DLTensor then names that device
    too, as a real one's would)."""

    def __init__(self, array, device=None):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        capsule = self.array.__dlpack__(**kwargs)
        if self.device is not None:
            # DLTensor: void *data, then int32 device type, int32 device id
            pointer = _capsule_pointer(capsule, b"dltensor")
            (ctypes.c_int32 * 2).from_address(pointer + 8)[:] = self.device
        return capsule

    def __dlpack_device__(self):
        return self.device if self.device is not None else self.array.__dlpack_device__()
