"""Run test code in a fresh interpreter, so that a crash or hang fails one test, not the run."""
import os
import subprocess
import sys
import textwrap

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def run_python(code, timeout=120):
    """Run *code* (dedented) in a fresh interpreter that can import the test helpers."""
    path = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=path))


def run_isolated(code, timeout=120):
    """Run *code* in a fresh interpreter; fail with its output unless it exits cleanly."""
    out = run_python(code, timeout)
    assert out.returncode == 0, f"exit code {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout
