"""LLVM 22's loop peeling aborted the process (an assertion in LoopPeel.cpp, peeling the last
iteration) on the default schedule of this operator, found by the differential fuzzer (seed
14000176).  It runs in a child process: an abort there fails the test instead of the run."""
import subprocess
import sys
import textwrap


def test_a_loop_llvm_would_peel_at_its_last_iteration_compiles_and_runs():
    code = textwrap.dedent("""
        import numpy as np
        from einloop import te, create_schedule, build
        T1 = te.compute((12, 7, 2), lambda i0, i1, i2: te.const(-2.0, "float64"), name="T1")
        T2 = te.compute((33,), lambda i0: te.if_then_else(
            ((i0 + -1) >= 0) & (i0 < 5), T1[0, 2, 0], te.const(-2.0, "float64"))
            * T1[11, te.minimum(i0 + -2, 6), 1], name="T2")
        f = build(create_schedule([T2]), [T2])
        out = np.full(33, np.nan)
        f(out)
        np.testing.assert_array_equal(out, np.full(33, 4.0))
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"EINLOOP_CACHE": "0", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
