"""OpenBLAS's threaded calls on einloop's OpenMP pool (einloop.runtime.blas, codegen.blas_bridge).

Each case runs in a fresh interpreter: the bridge is installed once per process, when einloop
first loads its OpenMP runtime.  The cases need NumPy's BLAS to be an OpenBLAS pthreads build
with the threads callback (0.3.28 and later, as NumPy's wheels have) and two CPUs; elsewhere
they skip and say why.
"""
import ctypes
import json
import os
import textwrap

import pytest

from einloop.runtime import blas
from isolated import run_isolated

CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _numpy_openblas():
    """NumPy's OpenBLAS file if it has the threads callback and runs its own threads, else a
    reason to skip."""
    import numpy as np
    np.ones((64, 64)) @ np.ones((64, 64))           # loads the BLAS
    for path in blas._loaded_openblas():
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        if blas._function(lib, "openblas_set_threads_callback_function") is None:
            return None, f"{path} predates OpenBLAS 0.3.28 (no threads callback)"
        name, get_parallel = blas._function(lib, "openblas_get_parallel")
        get_parallel.restype = ctypes.c_int
        if get_parallel() != 1:
            return None, f"{path} is not a pthreads build"
        return path, ""
    return None, "NumPy's BLAS is not OpenBLAS"


NUMPY_OPENBLAS, WHY_NOT = _numpy_openblas()
needs_openblas = pytest.mark.skipif(NUMPY_OPENBLAS is None or CPUS < 2,
                                    reason=WHY_NOT or "one CPU: OpenBLAS runs no threads")

# A threaded NumPy matmul checked against float64, and the bridge's count of calls around it.
PRELUDE = """
import ctypes, json, os, sys, time
import numpy as np
rng = np.random.default_rng(0)
a, b = rng.random((512, 512), np.float32), rng.random((512, 512), np.float32)
expect = a.astype(np.float64) @ b

def matmul_is_right():
    return bool(np.allclose(a @ b, expect, rtol=1e-4))
"""

JIT_BRIDGE = """
from einloop.codegen import blas_bridge, parallel
from einloop.runtime import blas
from isolated import run_isolated
parallel.gomp_runtime()                     # what the first parallel kernel does
calls = blas_bridge.calls
"""


def run(*parts, env=None, timeout=120):
    """Run the code *parts* in a fresh interpreter, with two OpenBLAS threads and the bridge on
    unless *env* says otherwise; its last line of output, parsed as JSON."""
    env = {"OPENBLAS_NUM_THREADS": "2", blas.OPT_OUT_VARIABLE: None, **(env or {})}
    out = run_isolated("".join(map(textwrap.dedent, parts)), timeout, env)
    return json.loads(out.strip().splitlines()[-1])


@needs_openblas
def test_numpys_threaded_matmul_runs_through_the_bridge_and_is_right():
    out = run(PRELUDE, JIT_BRIDGE, """
    before = calls()
    ok = matmul_is_right()
    print(json.dumps({"bridged": [b.path for b in blas.bridged_blas()], "ok": ok,
                      "calls": calls() - before}))
    """)
    assert out["ok"]
    assert [os.path.realpath(p) for p in out["bridged"]] == [os.path.realpath(NUMPY_OPENBLAS)]
    assert out["calls"] >= 1


# CPU time the process spends in a quiet 0.2 s right after a threaded matmul: OpenBLAS's own
# workers spin for about 2^28 cycles (~0.1 s) after a call, libgomp's (under einloop's spin
# policy) for about 30 us.  The first pause outlasts the spin of the matmul that PRELUDE ran
# before the bridge was installed.
IDLE_CPU = """
time.sleep(0.3)
a @ b
t0 = time.process_time()
time.sleep(0.2)
print(json.dumps({"cpu": time.process_time() - t0}))
"""


@needs_openblas
def test_after_a_bridged_matmul_no_thread_keeps_a_core_busy():
    bridged = run(PRELUDE, JIT_BRIDGE, IDLE_CPU)
    own_threads = run(PRELUDE, JIT_BRIDGE, IDLE_CPU, env={blas.OPT_OUT_VARIABLE: "0"})
    assert bridged["cpu"] < 0.02, bridged
    # the control shows what the bridge removes (if OpenBLAS spins less on some machine, the
    # first assertion still holds on its own)
    assert own_threads["cpu"] > bridged["cpu"], (own_threads, bridged)


@needs_openblas
def test_opting_out_leaves_openblas_on_its_own_threads():
    out = run(PRELUDE, JIT_BRIDGE, """
    ok = matmul_is_right()
    print(json.dumps({"bridged": len(blas.bridged_blas()), "calls": calls(), "ok": ok}))
    """, env={blas.OPT_OUT_VARIABLE: "0"})
    assert out == {"bridged": 0, "calls": 0, "ok": True}


@needs_openblas
def test_a_team_smaller_than_the_jobs_still_runs_them_side_by_side():
    # OMP_THREAD_LIMIT=1 gives every libgomp team one thread: the bridge must start a thread
    # for the other job, or OpenBLAS's GEMM jobs, which wait for each other, never finish
    out = run(PRELUDE, JIT_BRIDGE, """
    ok = all(matmul_is_right() for _ in range(5))
    print(json.dumps({"ok": ok, "calls": calls()}))
    """, env={"OMP_THREAD_LIMIT": "1"}, timeout=60)
    assert out["ok"] and out["calls"] >= 5


@needs_openblas
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_forked_child_runs_numpy_on_openblass_own_threads():
    # libgomp's pool does not survive fork: a bridged OpenBLAS in the child would wait forever
    out = run(PRELUDE, JIT_BRIDGE, """
    a @ b
    pid = os.fork()
    if pid == 0:
        os._exit(0 if matmul_is_right() and not blas.bridged_blas() else 3)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"child": os.waitstatus_to_exitcode(status),
                      "parent_still_bridged": len(blas.bridged_blas()), "ok": matmul_is_right()}))
    """, timeout=60)
    assert out == {"child": 0, "parent_still_bridged": 1, "ok": True}


@needs_openblas
def test_a_process_that_only_loads_an_exported_library_bridges_too(tmp_path):
    from einloop import build, create_schedule, te
    from einloop.codegen.parallel import gomp_available
    if not gomp_available():
        pytest.skip("libgomp is not available")
    A = te.placeholder((256, 64), name="A")
    B = te.compute((256, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = create_schedule(B)
    s[B].parallel(B.op.axis[0])
    lib = build(s, [A, B], name="double_rows").export_library(str(tmp_path / "k.so"))
    out = run(PRELUDE, f"""
    from einloop.runtime import blas, load_module
    m = load_module({lib!r})
    counter = ctypes.c_int64.in_dll(ctypes.CDLL({lib!r}), blas.CALLS_SYMBOL)
    before = counter.value
    ok = matmul_is_right()
    x = rng.random((256, 64), np.float32)
    y = np.empty_like(x)
    m["double_rows"](x, y)
    print(json.dumps({{"bridged": len(blas.bridged_blas()), "calls": counter.value - before,
                      "ok": ok and bool(np.array_equal(y, x * 2)),
                      "compiler": "llvmlite" in sys.modules}}))
    """)
    assert out == {"bridged": 1, "calls": out["calls"], "ok": True, "compiler": False}
    assert out["calls"] >= 1


@needs_openblas
def test_numpy_called_from_several_python_threads_at_once_stays_right():
    # each calling thread gets its own libgomp team; OpenBLAS serialises what it must
    out = run(PRELUDE, JIT_BRIDGE, """
    import threading
    results = []
    def work():
        results.append(all(matmul_is_right() for _ in range(20)))
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    print(json.dumps({"ok": results, "calls": calls()}))
    """, timeout=120)
    assert out["ok"] == [True, True, True] and out["calls"] >= 60
