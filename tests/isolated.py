"""Run test code in a fresh interpreter, so that a crash or hang fails one test, not the run."""
import os
import subprocess
import sys
import textwrap

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_python(code, timeout=120, env=None):
    """Run *code* (dedented) in a fresh interpreter that can import the test helpers; *env*:
    variables to set in its environment (a value of None removes the variable)."""
    path = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
    full = dict(os.environ, PYTHONPATH=path)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=full)


def run_isolated(code, timeout=120, env=None):
    """Run *code* in a fresh interpreter; fail with its output unless it exits cleanly."""
    out = run_python(code, timeout, env)
    assert out.returncode == 0, f"exit code {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def loaded_dense_matches_numpy(lib, k, m, sizes, kernel=None):
    """In a fresh interpreter without the compiler: load library *lib* and check that its kernel
    (*kernel* by name, else the module itself) computes ``a @ b`` for ``a`` of each row count in
    *sizes* (``a: [n, k]``, ``b: [k, m]``); returns what the child printed."""
    call = f"m[{kernel!r}]" if kernel else "m"
    return run_isolated(f"""
        import sys
        import numpy as np
        from einloop import runtime
        m = runtime.load_module({str(lib)!r})
        f = {call}
        b = np.arange({k} * {m}, dtype=np.float32).reshape({k}, {m}) / 1000
        for n in {tuple(sizes)!r}:
            a = np.ones((n, {k}), np.float32)
            c = np.zeros((n, {m}), np.float32)
            f(a, b, c)
            assert np.allclose(c, a @ b, rtol=1e-5), n
        assert "llvmlite" not in sys.modules
        print(type(f).__name__)
    """)
