"""einloop.runtime stands alone: importing it and using its pieces loads no compiler.

A deploy process (issue 9) loads exported kernels with einloop.runtime only; these checks run in
a fresh interpreter, since this test process has long imported llvmlite and the schedule.
"""
import os

from isolated import run_isolated

CHECK_NOTHING_COMPILER_RELATED = """
import sys
sys.path.insert(0, %r)
import numpy as np
import einloop.runtime as rt
from einloop.runtime import gomp, threads
from native_stub import stub_kernel

sig = rt.Signature((rt.BufferSpec("A", "float32", (4, 8)), rt.BufferSpec("B", "float32", [4])),
                   (rt.BufferSpec("T", "int64", (3,)),), ("B",))
assert sig.written == (False, True) and [s.name for s in sig.inputs] == ["A"]
assert str(sig) == "A: float32[4, 8], B: float32[4]" and sig.args[1].shape == (4,)
t = rt.time_callable(lambda: None, number=2, repeat=2)
assert isinstance(t, rt.Timing) and t.number == 2 and len(t.results) == 2
rt.warm_allocator()
assert rt.default_num_threads() >= 1
assert threads.spin_count_for(None) == threads.FALLBACK_SPIN_COUNT
assert threads.SPIN_COUNT_RANGE[0] <= threads.spin_count_for(1e-8) <= threads.SPIN_COUNT_RANGE[1]
gomp.gomp_available()        # loads libgomp (if present) with ctypes alone
k = stub_kernel(parallel=True)             # a Kernel over native code no compiler made
a, b = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
k(a, b)
assert (b == 2 * a).all() and k.time(a, b, number=1, repeat=1).number == 1

loaded = sorted(m for m in sys.modules
                if m.split(".")[0] == "llvmlite"
                or m.startswith(("einloop.codegen", "einloop.schedule", "einloop.te",
                                 "einloop.arith", "einloop.ir", "einloop.autotune")))
assert not loaded, loaded
print("ok")
""" % os.path.dirname(os.path.abspath(__file__))


def test_runtime_imports_no_compiler():
    assert run_isolated(CHECK_NOTHING_COMPILER_RELATED).strip().endswith("ok")
