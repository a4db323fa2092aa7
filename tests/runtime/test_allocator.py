"""The first kernel a process makes warms glibc's allocator (einloop.runtime.allocator), so its
temporaries come from the heap in a fresh process as in a long-running one."""
import subprocess
import sys
import textwrap

import pytest

PROBE = """
import numpy as np
def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
def maps_a_fresh_block():
    before = mappings()
    block = np.empty(1 << 20, np.uint8)     # 1 MiB: over glibc's first mmap threshold (128 KiB)
    grew = mappings() > before
    del block                               # (NumPy madvises blocks of 4 MiB and more, splitting mappings)
    return grew
print("before any kernel:", maps_a_fresh_block())
{make_kernel}
print("after the first kernel:", maps_a_fresh_block())
"""

KERNEL = """
from einloop import te, create_schedule, build
X = te.placeholder((8,), name="X")
Y = te.compute((8,), lambda i: X[i] + 1.0, name="Y")
build(create_schedule(Y), [X, Y])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_first_kernel_warms_the_allocator():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE.format(
        make_kernel=KERNEL))], capture_output=True, text=True, timeout=120, check=True).stdout
    if "before any kernel: False" in out:
        pytest.skip("this allocator does not map large blocks afresh (not glibc's defaults)")
    assert "before any kernel: True" in out and "after the first kernel: False" in out, out
