"""The first kernel a process makes warms glibc's allocator (einloop.runtime.allocator), so its
temporaries come from the heap in a fresh process as in a long-running one."""
import ctypes
import ctypes.util
import os
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

def maps_a_fresh_block(mib):
    # hblkhd: bytes glibc holds in blocks it mapped on their own (over its mmap threshold);
    # freeing such a block raises the threshold to its size, so each probe asks for more
    before = libc.mallinfo2().hblkhd
    block = np.empty(mib << 20, np.uint8)
    mapped = libc.mallinfo2().hblkhd > before
    del block
    return mapped

print("before any kernel:", maps_a_fresh_block(6))
{disable}
from einloop import runtime                 # a deployment: no compiler, which would warm it too
runtime.load_module({library!r})
print("after the first kernel:", maps_a_fresh_block(12))
"""


def _glibc_mallinfo2():
    name = ctypes.util.find_library("c")
    return bool(name) and hasattr(ctypes.CDLL(name), "mallinfo2")


def probe(library, disable=""):
    """Run PROBE in a fresh process with glibc's default malloc settings: a MALLOC_*_ variable
    (Dask sets MALLOC_TRIM_THRESHOLD_ in processes it starts) turns the threshold's adjustment
    off, and with it what this test checks."""
    code = textwrap.dedent(PROBE).format(library=library, disable=disable)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True, env=env).stdout


@pytest.mark.skipif(not _glibc_mallinfo2(), reason="needs glibc's mallinfo2 (glibc >= 2.33)")
def test_the_first_kernel_a_deployed_process_loads_warms_the_allocator(tmp_path):
    from einloop import build, create_schedule, te
    from einloop.codegen.export import find_compiler
    if find_compiler() is None:
        pytest.skip("export_library needs a C compiler to link")
    X = te.placeholder((8,), name="X")
    Y = te.compute((8,), lambda i: X[i] + 1.0, name="Y")
    library = str(tmp_path / "y.so")
    build(create_schedule(Y), [X, Y]).export_library(library)
    out = probe(library)
    assert "before any kernel: True" in out, out      # a fresh process maps a 6 MiB block
    assert "after the first kernel: False" in out, out    # 12 MiB then comes from the heap
    cold = probe(library, "import einloop.runtime.allocator as a; a._warmed = True")
    assert "after the first kernel: True" in cold, cold   # what it would do without the warming
