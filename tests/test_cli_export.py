"""``einloop export``: the best logged schedule of a template or an auto-scheduled function,
built and written as a library that a fresh interpreter loads with einloop.runtime alone."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from einloop import autotune, build
from einloop.autotune.log import record
from einloop.cli import main

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
GEMM_PY = os.path.join(EXAMPLES, "gemm.py")
ARGS = (40, 48, 32)     # M, N, K: the template needs a 16-multiple factor of N
pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")),
                                reason="no C compiler (cc, gcc, clang) on PATH")

LOAD_AND_RUN = """
import sys, numpy as np
import einloop.runtime as rt
m = rt.load_module(sys.argv[1])
a = np.load(sys.argv[2]); b = np.load(sys.argv[3])
c = np.zeros((a.shape[0], b.shape[1]), np.float32)
m[sys.argv[4]](a, b, c)
np.save(sys.argv[5], c)
assert "llvmlite" not in sys.modules
print([t.type_str() for t in m[sys.argv[4]].signature.temps])
"""


def _log_one(task, candidate, path):
    ok = autotune.MeasureResult((1e-3,), autotune.MeasureErrorNo.NO_ERROR, "", 0.1, 0.0)
    record.append(path, [record.encode(task, candidate, ok)])


def _load_and_run(tmp_path, lib, name):
    rng = np.random.default_rng(3)
    a = rng.random((ARGS[0], ARGS[2]), np.float32)
    b = rng.random((ARGS[2], ARGS[1]), np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(lib), str(tmp_path / "a.npy"),
                          str(tmp_path / "b.npy"), name, str(tmp_path / "c.npy")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), a @ b, rtol=1e-4)
    return out.stdout.strip()


def test_export_a_template_builds_its_logged_config(tmp_path, capsys):
    sys.path.insert(0, EXAMPLES)
    task = autotune.create_task("gemm_template", ARGS, module="gemm")
    config = task.config_space.get(len(task.config_space) // 3)
    log = tmp_path / "gemm.jsonl"
    _log_one(task, config, log)
    lib = tmp_path / "gemm.so"
    code = main(["export", f"{GEMM_PY}:gemm_template", "--args", *map(str, ARGS), "--log",
                 str(log), "-o", str(lib), "--header"])
    assert code == 0
    said = capsys.readouterr().out
    assert "(tuned schedule)" in said and "kernel 'gemm_template'" in said
    assert "int32_t einloop_gemm_template(" in (tmp_path / "gemm.h").read_text()
    expected = build(*task.instantiate(config), name="gemm_template")
    temps = _load_and_run(tmp_path, lib, "gemm_template")
    assert temps == str([t.type_str() for t in expected.signature.temps])


def test_export_an_auto_scheduled_function(tmp_path, capsys):
    sys.path.insert(0, EXAMPLES)
    task = autotune.create_task("gemm", ARGS, module="gemm")
    log = tmp_path / "auto.jsonl"
    _log_one(task, task.reference_candidate(), log)
    lib = tmp_path / "kernels" / "auto.so"        # a folder that does not exist yet
    assert main(["export", f"{GEMM_PY}:gemm", "--args", *map(str, ARGS), "--log", str(log),
                 "-o", str(lib), "--name", "matmul"]) == 0
    assert "(tuned schedule)" in capsys.readouterr().out
    _load_and_run(tmp_path, lib, "matmul")


def test_export_without_a_logged_schedule_is_a_one_line_error(tmp_path, capsys):
    missing = tmp_path / "none.jsonl"
    assert main(["export", f"{GEMM_PY}:gemm", "--args", "8", "8", "8", "--log", str(missing),
                 "-o", str(tmp_path / "x.so")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("einloop: error: no tuning log at") and err.count("\n") == 1
    assert not (tmp_path / "x.so").exists()
