"""What the DLPack tests share: a small kernel (B = 2 A + 1) and an array that speaks DLPack only."""
from einloop import build, create_schedule, te

SHAPE = (4, 6)


def twice_plus_one(shape=SHAPE):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return build(create_schedule(B), [A, B])


class DLPackOnly:
    """Exports a NumPy array through DLPack and nothing else (as a foreign tensor would); the
    device it reports may be overridden (a fake GPU tensor)."""

    def __init__(self, array, device=None):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device if self.device is not None else self.array.__dlpack_device__()
