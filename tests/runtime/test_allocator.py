"""The first kernel a process makes warms glibc's allocator (einloop.runtime.allocator), so its
temporaries come from the heap in a fresh process as in a long-running one."""
import ctypes
import ctypes.util
import subprocess
import sys
import textwrap

import pytest

PROBE = """
import ctypes, ctypes.util
import numpy as np

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2

def maps_a_fresh_block():
    # hblkhd: bytes glibc holds in blocks it mapped on their own (over its mmap threshold)
    before = libc.mallinfo2().hblkhd
    block = np.empty(6 << 20, np.uint8)
    mapped = libc.mallinfo2().hblkhd > before
    del block
    return mapped

print("before any kernel:", maps_a_fresh_block())
from einloop import te, create_schedule, build
X = te.placeholder((8,), name="X")
Y = te.compute((8,), lambda i: X[i] + 1.0, name="Y")
build(create_schedule(Y), [X, Y])
print("after the first kernel:", maps_a_fresh_block())
"""


def _glibc_mallinfo2():
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "mallinfo2")


@pytest.mark.skipif(not _glibc_mallinfo2(), reason="needs glibc's mallinfo2 (glibc >= 2.33)")
def test_the_first_kernel_warms_the_allocator():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "before any kernel: True" in out, out      # a fresh process maps a 6 MiB block
    assert "after the first kernel: False" in out, out    # then it comes from the heap
