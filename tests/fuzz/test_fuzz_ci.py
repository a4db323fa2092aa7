"""The CI slice of the differential fuzzer, and tests of the fuzzer's own parts."""
import json
import sys

import numpy as np

from .campaign import case_seeds, failure_groups, run
from .cases import make_case
from .harness import run_case
from .pool import Limits, Worker
from .reference import evaluate
from .repro import run_reproducer
from .shrink import shrink

CI_SEED, CI_CASES = 0, 100


def test_fuzz_fixed_seed_has_no_failures():
    """A hundred random operators x schedules: no crash, hang, wrong result or stray error
    (`make fuzz` runs campaigns of any size)."""
    results = run((make_case(s) for s in case_seeds(CI_SEED, CI_CASES)), jobs=2,
                  limits=Limits(compile_timeout=60, run_timeout=20))
    lines = []
    for sig, items in failure_groups(results).items():
        case, outcome = items[0]
        lines.append(f"{len(items)} x {' | '.join(map(str, sig))}: e.g. "
                     f"python -m tests.fuzz --case {case['seed']}\n    {outcome['msg'][:300]}")
    assert not lines, "fuzz failures:\n" + "\n".join(lines)
    ok = sum(o["status"] == "ok" for _, o in results)
    assert ok >= 0.7 * CI_CASES, f"only {ok}/{CI_CASES} cases ran: the generator or einloop " \
                                 "rejects too much (run python -m tests.fuzz to see why)"


def _small_case():
    """R = relu(A @ float(B)) by einsum, and Q = B[0, i * i // 3] // (i - 2): a read einloop
    must clamp (at i == 4) and a floor division by zero (at i == 2)."""
    return {"seed": 5, "outputs": ["R", "Q"], "args": ["A", "B", "R", "Q"], "tensors": [
        {"kind": "placeholder", "name": "A", "shape": [4, 3], "dtype": "float32",
         "range": [-1.0, 1.0]},
        {"kind": "placeholder", "name": "B", "shape": [3, 5], "dtype": "int32", "range": [-9, 9]},
        {"kind": "compute", "name": "F", "shape": [3, 5], "dtype": "float32", "vars": ["i", "j"],
         "body": ["cast", "float32", ["read", "B", [["var", "i"], ["var", "j"]]]]},
        {"kind": "einsum", "name": "P", "subscripts": "ik,kj->ij", "operands": ["A", "F"],
         "dtype": "float32", "shape": [4, 5]},
        {"kind": "compute", "name": "R", "shape": [4, 5], "dtype": "float32", "vars": ["i", "j"],
         "body": ["mm", "maximum", ["read", "P", [["var", "i"], ["var", "j"]]],
                  ["const", 0.0, "float32"]]},
        {"kind": "compute", "name": "Q", "shape": [5], "dtype": "int32", "vars": ["i"],
         "body": ["bin", "//", ["read", "B", [["const", 0, "int64"],
                                              ["bin", "//", ["bin", "*", ["var", "i"],
                                                             ["var", "i"]], ["lit", 3]]]],
                  ["bin", "-", ["cast", "int32", ["var", "i"]], ["lit", 2]]]},
    ], "schedule": [
        {"p": "axes", "tensor": "R", "axis": ["L1", "L2"], "reduce_axis": []},
        {"p": "split", "tensor": "R", "loop": "L2", "factor": 4, "out": ["L3", "L4"]},
        {"p": "vectorize", "tensor": "R", "loop": "L4"},
        {"p": "compute_inline", "tensor": "F"},
    ]}


def test_reference_follows_documented_semantics():
    """Clamped reads, floor division with x // 0 == 0, einsum, elementwise maximum."""
    a = np.linspace(-1, 1, 12).reshape(4, 3).astype("float32")
    b = np.arange(15).reshape(3, 5).astype("int32") - 7
    got = evaluate(_small_case(), {"A": a, "B": b})
    np.testing.assert_allclose(got["R"].val, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-12)
    assert (got["R"].err < 1e-5).all()
    col = np.clip(np.arange(5) ** 2 // 3, 0, 4)                  # the read is clamped
    with np.errstate(divide="ignore"):
        want_q = np.floor_divide(b[0, col], np.arange(5, dtype=np.int32) - 2)
    assert list(got["Q"].val) == list(want_q) and want_q[2] == 0


def test_harness_checks_a_scheduled_case_against_the_reference():
    outcome = run_case(_small_case())
    assert outcome["status"] == "ok", outcome


def _fake_worker(code):
    return Worker(Limits(compile_timeout=1, run_timeout=1, other_timeout=1),
                  command=[sys.executable, "-c", code])


def test_pool_reports_a_crash_and_a_hang_and_goes_on():
    crash = _fake_worker("import os, signal, sys; sys.stdin.readline(); "
                         "print('{\"phase\": \"run:x\"}', flush=True); "
                         "os.kill(os.getpid(), signal.SIGSEGV)")
    out = crash.run({"seed": 1})
    assert (out["status"], out["etype"], out["phase"]) == ("crash", "signal SIGSEGV", "run:x")
    hang = _fake_worker("import sys, time; sys.stdin.readline(); "
                        "print('{\"phase\": \"build:x\"}', flush=True); time.sleep(60)")
    out = hang.run({"seed": 2})
    assert (out["status"], out["phase"]) == ("hang", "build:x")
    assert hang.proc is None            # killed; the next case starts a fresh process
    for w in (crash, hang):
        w.close()


def test_shrinker_keeps_the_failure_and_drops_the_rest():
    """A fake failure 'any exp call' shrinks to a case that still has one and little else."""
    def has_exp(case):
        return '"exp"' in json.dumps([t.get("body") for t in case["tensors"]])

    def fake_run(case):
        status = "internal" if has_exp(case) else "ok"
        return {"status": status, "phase": "build:scheduled", "etype": "InternalError",
                "msg": "boom"}

    case = next(c for c in map(make_case, range(100, 400))
                if has_exp(c) and len(c["tensors"]) >= 4 and len(c["schedule"]) >= 4)
    small, sig = shrink(case, fake_run, budget_s=30)
    assert sig[0] == "internal" and has_exp(small)
    assert len(small["tensors"]) < len(case["tensors"]) and not small["schedule"]


def test_reproducer_is_standalone_and_runs(tmp_path):
    case = _small_case()
    outcome = {"status": "wrong", "phase": "check", "etype": None,
               "msg": "scheduled/threads=2/fence=before: made up for the test"}
    proc = run_reproducer(case, outcome, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.rstrip().endswith("done") and "WRONG" not in proc.stdout
