"""Tuning works from anywhere a Python user runs code: a script without a main guard, standard
input, ``python -c`` and a Jupyter notebook, with the operator defined right there (in
``__main__``).

Each case runs a real interpreter (or a real kernel, for the notebook) that auto-schedules an
operator defined in that same code, with real build workers and runner.  The code saves its
inputs and the tuned kernel's outputs, and this test checks them against NumPy and reads the
tuning log it wrote.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from einloop.autotune.log import record
from einloop.autotune.measure.status import MeasureErrorNo

# no `if __name__ == "__main__":` on purpose: the worker processes must never run this again
SNIPPET = textwrap.dedent("""
    import os
    import numpy as np
    from einloop import te, build, autotune
    open("ran.txt", "a").write(f"{os.getpid()}\\n")     # once per run of this code

    def row_sum_twice(m, n):
        A = te.placeholder((m, n), "float32", name="A")
        k = te.reduce_axis((0, n), name="k")
        B = te.compute((m,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
        return [A, B]

    option = autotune.measure_option(number=1, repeat=1, n_parallel=2, timeout=20)
    s, args = autotune.auto_schedule(row_sum_twice, args=(16, 24), n_trial=4, log="tune.jsonl",
                                     tuner="random", seed=0, measure_option=option, quiet=True)
    f = build(s, args)
    a = np.random.default_rng(1).random((16, 24), dtype=np.float32)
    b = np.zeros(16, np.float32)
    f(a, b)
    np.savez("result.npz", a=a, b=b)
    print("TUNED")
""")

TEMPLATE_SNIPPET = textwrap.dedent("""
    import os
    import numpy as np
    from einloop import te, create_schedule, build, autotune
    open("ran.txt", "a").write(f"{os.getpid()}\\n")     # once per run of this code

    OFFSET = 1.5                # a global of the main module the template reads

    @autotune.template("anywhere_axpb")
    def axpb(n):
        A = te.placeholder((n,), "float32", name="A")
        B = te.compute((n,), lambda i: A[i] * 3.0 + OFFSET, name="B")
        s = create_schedule(B)
        cfg = autotune.get_config()
        cfg.define_split("t", s[B].op.axis[0], num_outputs=2)
        cfg["t"].apply(s, B, s[B].op.axis[0])
        return s, [A, B]

    task = autotune.create_task("anywhere_axpb", (64,))
    autotune.RandomTuner(task, seed=0).tune(
        4, measure_option=autotune.measure_option(number=1, repeat=1, n_parallel=2, timeout=20),
        callbacks=[autotune.log_to_file("tune.jsonl")], quiet=True)
    with autotune.apply_history_best("tune.jsonl"):
        s, args = axpb(64)
    f = build(s, args)
    a = np.random.default_rng(1).random(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    f(a, b)
    np.savez("result.npz", a=a, b=b)
    print("TUNED")
""")


def _env():
    import einloop
    root = os.path.dirname(os.path.dirname(einloop.__file__))
    return dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(cmd, folder, stdin=None):
    run = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=_env(),
                         cwd=folder, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "TUNED" in run.stdout
    return run.stdout + run.stderr


def _check(folder, expect, trials=4):
    """The code ran once (no worker process ran it again), the saved outputs match NumPy and
    the log holds the measured trials, some of them ok."""
    assert len((folder / "ran.txt").read_text().split()) == 1
    out = np.load(folder / "result.npz")
    np.testing.assert_allclose(out["b"], expect(out["a"]), rtol=1e-5, atol=1e-5)
    records = record.load(folder / "tune.jsonl")
    assert 1 <= len(records) <= trials
    assert any(r.error_no == MeasureErrorNo.NO_ERROR for r in records)


def _row_sum_twice(a):
    return (a.astype(np.float64) * 2.0).sum(axis=1)


def test_script_without_main_guard(tmp_path):
    (tmp_path / "tune_it.py").write_text(SNIPPET)
    output = _run([sys.executable, "tune_it.py"], tmp_path)
    assert "Traceback" not in output
    _check(tmp_path, _row_sum_twice)


def test_snippet_on_standard_input(tmp_path):
    _run([sys.executable, "-"], tmp_path, stdin=SNIPPET)
    _check(tmp_path, _row_sum_twice)


def test_python_dash_c(tmp_path):
    _run([sys.executable, "-c", SNIPPET], tmp_path)
    _check(tmp_path, _row_sum_twice)


def test_template_defined_in_a_script_without_main_guard(tmp_path):
    """A template is a function of the main module too: it reaches the workers by value."""
    (tmp_path / "tune_template.py").write_text(TEMPLATE_SNIPPET)
    _run([sys.executable, "tune_template.py"], tmp_path)
    _check(tmp_path, lambda a: a * 3.0 + 1.5)


def _notebook(path, sources):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(textwrap.dedent(src)) for src in sources]
    nbformat.write(nb, str(path))


def _kernel_env(tmp_path):
    """A kernelspec running this interpreter, in a Jupyter path of its own (no global state)."""
    jupyter = tmp_path / "jupyter"
    spec = jupyter / "kernels" / "einloop-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "einloop test", "language": "python"}))
    return dict(_env(), JUPYTER_PATH=str(jupyter), JUPYTER_DATA_DIR=str(jupyter),
                JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
                JUPYTER_CONFIG_DIR=str(tmp_path / "config"), IPYTHONDIR=str(tmp_path / "ipython"))


@pytest.mark.parametrize("snippet, expect", [(SNIPPET, _row_sum_twice),
                                             (TEMPLATE_SNIPPET, lambda a: a * 3.0 + 1.5)],
                         ids=["auto_schedule", "template"])
def test_notebook_executed_headless(tmp_path, snippet, expect):
    """The operator is defined in a notebook cell (the kernel's ``__main__``), as a user does."""
    pytest.importorskip("nbconvert")
    pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    head, _, rest = snippet.partition("\n\n")           # imports in their own cell
    define, _, tune = rest.rpartition("\n\n")
    _notebook(tmp_path / "tune.ipynb", [head, define, tune,
                                        "import sys; print(sys.executable)"])
    run = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                          "--ExecutePreprocessor.kernel_name=einloop-test",
                          "--ExecutePreprocessor.timeout=170", "--output", "ran.ipynb",
                          "tune.ipynb"], capture_output=True, text=True, cwd=tmp_path,
                         env=_kernel_env(tmp_path), timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    import nbformat
    cells = nbformat.read(str(tmp_path / "ran.ipynb"), as_version=4).cells
    printed = ["".join(o.get("text", "") for o in c.outputs) for c in cells]
    assert "TUNED" in "".join(printed)
    assert printed[-1].strip() == sys.executable         # the kernel ran this interpreter
    _check(tmp_path, expect)
