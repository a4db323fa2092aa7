"""The fuzzer's handling of the newer constructs: argmax/argmin, tuple reducers, te.welford,
multi-output computes, cumsum/cumprod, user-written te.scans, scatter_add and histogram,
te.extern (gen_lang, reference_lang, program_lang, sched_lang, extern_fuzz), checked on
hand-written cases."""
import collections
import copy

import numpy as np
import pytest

import einloop
from einloop import te

from .campaign import case_seeds
from .cases import make_case
from .harness import random_inputs, run_case
from .reference import evaluate
from .repro import run_reproducer
from .shrink import prune


def _ph(name, shape, dtype, rng):
    return {"kind": "placeholder", "name": name, "shape": shape, "dtype": dtype, "range": rng}


def _lang_case():
    """X (5, 7) float32 with ties and a NaN (its tied copy T), I (9,) int32 indices from -2 to
    6 (outside 0..3 at both ends), U (9, 3) float32 updates."""
    x = ["read", "X", [["var", "i0"], ["var", "i1"]]]
    tensors = [
        _ph("X", [5, 7], "float32", [-1.0, 1.0]), _ph("I", [9], "int32", [-2, 6]),
        _ph("U", [9, 3], "float32", [-1.0, 1.0]),
        {"kind": "compute", "name": "T", "shape": [5, 7], "dtype": "float32",
         "vars": ["i0", "i1"], "range": [-5, 5], "private": True, "nan": True,
         "body": ["select", ["cmp", "==", ["var", "i1"], ["lit", 2]], ["nan", "float32"],
                  ["call", "floor", ["bin", "*", x, ["lit", 2.0]]]]},
        {"kind": "argreduce", "fn": "argmax", "name": "M", "src": "T", "axis": 1,
         "index_dtype": "int32", "shape": [5], "dtype": "int32",
         "parts": [{"name": "M", "dtype": "int32", "range": [0, 6]},
                   {"name": "Mv", "dtype": "float32", "range": [-5, 5], "private": True}]},
        {"kind": "tuple_reduce", "name": "W", "reducer": "welford", "shape": [5],
         "vars": ["i0"], "reduce": [{"name": "k", "start": 0, "extent": 7}], "dtype": "float32",
         "body": ["read", "X", [["var", "i0"], ["var", "k"]]],
         "parts": [{"name": "W", "dtype": "float32", "range": [0, 7]},
                   {"name": "Wm", "dtype": "float32", "range": [-1, 1]},
                   {"name": "Wq", "dtype": "float32", "range": [0, 28]}]},
        {"kind": "tuple_reduce", "name": "C", "reducer": "maxcount", "shape": [9],
         "vars": ["i0"], "reduce": [{"name": "k", "start": 0, "extent": 3}], "dtype": "int32",
         "body": ["bin", "%", ["read", "I", [["var", "i0"]]], ["lit", 2]],
         "parts": [{"name": "C", "dtype": "int32", "range": [0, 1]},
                   {"name": "Cc", "dtype": "int32", "range": [0, 3]}]},
        {"kind": "multi", "name": "P", "shape": [5, 7], "vars": ["i0", "i1"], "dtype": "float32",
         "bodies": [["bin", "+", x, ["lit", 1.0]], ["cast", "int32", ["bin", "*", x, ["lit", 4.0]]]],
         "parts": [{"name": "P", "dtype": "float32", "range": [0, 2]},
                   {"name": "Pb", "dtype": "int32", "range": [-4, 4]}]},
        {"kind": "scan", "fn": "cumsum", "name": "S", "src": "Pb", "axis": 0, "out_dtype": "int32",
         "exclusive": True, "shape": [5, 7], "dtype": "int32", "range": [-20, 20]},
        {"kind": "scan", "fn": "cumprod", "name": "R", "src": "P", "axis": 1, "out_dtype": None,
         "exclusive": False, "shape": [5, 7], "dtype": "float32", "range": [0, 128]},
        {"kind": "scatter_add", "name": "H", "shape": [4, 3], "axis": 0, "index": "I",
         "updates": "U", "dtype": "float32", "range": [-9, 9]},
        {"kind": "histogram", "name": "G", "shape": [4], "bins": 4, "data": "I", "weights": None,
         "dtype": "int32", "range": [0, 9]},
        {"kind": "extern", "name": "Y", "src": "P", "shape": [5, 7], "dtype": "float32",
         "range": [1, 5]},
        {"kind": "embedding", "name": "EB", "shape": [4, 3], "index": "I", "updates": "U",
         "dtype": "float32", "range": [-9, 9]},
        {"kind": "compute", "name": "V1", "shape": [9], "dtype": "float32", "vars": ["i0"],
         "body": ["read", "U", [["var", "i0"], ["const", 0, "int64"]]], "range": [-1, 1]},
        {"kind": "scatter_minmax", "name": "MX", "fn": "max", "shape": [5], "index": "I",
         "updates": "V1", "where": True, "init": None, "dtype": "float32", "extent": 9,
         "range": [-1, 1], "private": True},
    ]
    outputs = ["M", "Mv", "W", "Wm", "Wq", "C", "Cc", "S", "R", "H", "G", "Y", "EB", "MX"]
    return {"seed": 3, "tensors": tensors, "outputs": outputs,
            "args": ["X", "I", "U"] + outputs, "schedule": [
                {"p": "axes", "tensor": "M", "axis": ["L1"], "reduce_axis": ["L2"]},
                {"p": "split", "tensor": "M", "loop": "L2", "factor": 2, "out": ["L3", "L4"]},
                {"p": "rfactor", "tensor": "M", "loop": "L4", "factor_axis": 0,
                 "out": ["M_rf", "M_rf1"]},
                {"p": "axes", "tensor": "S", "axis": ["L5", "L6"], "reduce_axis": []},
                {"p": "reorder", "tensor": "S", "loops": ["L6", "L5"]},
                {"p": "vectorize", "tensor": "S", "loop": "L5", "illegal": True},   # scan axis
                {"p": "axes", "tensor": "G", "axis": [], "reduce_axis": ["L7"]},
                {"p": "split", "tensor": "G", "loop": "L7", "nparts": 3, "out": ["L8", "L9"]},
                {"p": "rfactor", "tensor": "G", "loop": "L8", "factor_axis": 0, "out": "G_rf"},
                {"p": "axes", "tensor": "G_rf", "axis": ["L10"], "reduce_axis": ["L11"]},
                {"p": "parallel", "tensor": "G_rf", "loop": "L10"},
                {"p": "axes", "tensor": "H", "axis": ["L12"], "reduce_axis": ["L13"]},
                {"p": "parallel", "tensor": "H", "loop": "L13", "illegal": True},   # domain
            ]}


def _case_inputs():
    case = _lang_case()
    inputs = random_inputs(case, case["seed"])
    inputs["I"] = np.array([-2, 0, 5, 3, 3, 6, 1, -1, 2], "int32")    # outside 0..3 both ways
    return case, inputs


def test_reference_of_the_new_constructs_follows_numpy():
    case, inputs = _case_inputs()
    want = evaluate(case, inputs)
    x, ids, u = inputs["X"].astype(np.float64), inputs["I"], inputs["U"].astype(np.float64)
    assert list(want["M"].val) == [2] * 5 and np.isnan(want["Mv"].val).all()   # NaN wins
    np.testing.assert_allclose(want["Wm"].val, x.mean(1), rtol=1e-12)
    np.testing.assert_allclose(want["Wq"].val, x.var(1) * 7, rtol=1e-9)
    assert (want["W"].val == 7).all()
    # C's body does not depend on k: its max is the value, seen 3 times (floor modulo)
    np.testing.assert_array_equal(want["C"].val, np.mod(ids, 2))
    assert list(want["Cc"].val) == [3] * 9
    pb = (x * 4).astype(np.int32)
    np.testing.assert_array_equal(want["S"].val[1:], np.cumsum(pb, 0)[:-1])   # exclusive
    assert (want["S"].val[0] == 0).all()
    np.testing.assert_allclose(want["R"].val, np.cumprod(x + 1, 1), rtol=1e-6)
    h = np.zeros((4, 3))
    np.add.at(h, np.clip(ids, 0, 3), u)                                          # clamped
    np.testing.assert_allclose(want["H"].val, h, rtol=1e-12)
    np.testing.assert_array_equal(want["G"].val, np.bincount(np.clip(ids, 0, 3), minlength=4))
    np.testing.assert_allclose(want["Y"].val, 2 * (x + 1) + 1, rtol=1e-12)     # the C call
    np.testing.assert_allclose(want["EB"].val, h, rtol=1e-12)                  # same updates
    keep = (ids >= 0) & (ids < 5)                    # where=: out-of-range ids are skipped
    mx = np.full(5, -np.inf)
    np.maximum.at(mx, ids[keep], u[keep, 0])
    np.testing.assert_array_equal(want["MX"].val, mx)
    assert np.isinf(mx).any()                        # a bin no update reaches keeps -inf


def test_tied_rows_go_to_the_first_index_and_maxcount_counts_them():
    case, inputs = _case_inputs()
    inputs["X"][:] = np.float32(0.25)                # floor(0.5) = 0 everywhere: all ties
    case["tensors"][3]["body"] = ["call", "floor", ["bin", "*", ["read", "X", [
        ["var", "i0"], ["var", "i1"]]], ["lit", 2.0]]]
    want = evaluate(case, inputs)
    assert list(want["M"].val) == [0] * 5 and list(want["Mv"].val) == [0.0] * 5
    case["tensors"][6]["body"] = ["bin", "%", ["read", "I", [["var", "k"]]], ["lit", 2]]
    inputs["I"][:3] = [1, 0, 1]                      # over k: max 1, twice
    want = evaluate(case, inputs)
    assert list(want["C"].val) == [1] * 9 and list(want["Cc"].val) == [2] * 9


def test_the_hand_case_runs_ok_under_its_schedule():
    """Tuple rfactor, a histogram's privatized parallel domain, a reordered scan, a C call on
    one output of a multi-output stage; the illegal steps (a vectorized scan axis, a parallel
    scatter domain loop) are refused."""
    outcome = run_case(_lang_case())
    assert outcome["status"] == "ok", outcome


def test_an_accepted_illegal_step_is_a_failure():
    case = _lang_case()
    case["schedule"] = [{"p": "axes", "tensor": "S", "axis": ["L5", "L6"], "reduce_axis": []},
                        {"p": "vectorize", "tensor": "S", "loop": "L6", "illegal": True}]
    outcome = run_case(case)
    assert (outcome["status"], outcome["etype"]) == ("exception", "IllegalStepAccepted"), outcome


def test_generated_cases_cover_every_construct_and_its_schedules():
    kinds, features = collections.Counter(), collections.Counter()
    for seed in case_seeds(0, 200):
        case = make_case(seed, lang_rate=0.8)
        kinds.update(t["kind"] for t in case["tensors"])
        features.update(case["features"])
    for kind in ("argreduce", "tuple_reduce", "welford", "multi", "scan", "user_scan",
                 "scatter_add", "histogram", "embedding", "scatter_minmax", "extern"):
        assert kinds[kind] >= 5, kinds
    for f in ("rfactor-tuple", "rfactor-scatter", "illegal", "nan", "tied", "scan-exclusive",
              "scatter-where", "user-scan", "scan-two-states", "scan-lag2", "scan-stencil",
              "scan-tanh", "welford"):
        assert features[f] >= 1, features


def test_prune_keeps_a_multi_output_stage_needed_for_its_second_part():
    case = _lang_case()
    case["outputs"] = ["Mv"]
    small = prune(copy.deepcopy(case))
    assert [t["name"] for t in small["tensors"]] == ["X", "T", "M"]
    assert [st["tensor"] for st in small["schedule"]] == ["M", "M", "M"]


def test_extern_reads_the_output_it_names():
    """Found by the fuzzer (seeds 73000157, 73000179, 73000251 with --lang-rate 0.7; 73000038
    crashed when output 0 was uint8)."""
    from .extern_fuzz import library
    A = te.placeholder((3, 4), name="A")
    S, P = te.compute((3, 4), lambda i, j: (A[i, j] + 1.0, A[i, j] * 2.0), name="SP")
    Y = te.extern((3, 4), [P], "fuzz_affine_f32_2", library=library(), name="Y")
    a, y = np.arange(12, dtype="float32").reshape(3, 4), np.zeros((3, 4), "float32")
    einloop.build(einloop.create_schedule([Y]), [A, Y])(a, y)
    np.testing.assert_array_equal(y, 2 * (2 * a) + 1)        # got 2 * (a + 1) + 1: S, not P


def test_reproducer_of_a_multi_output_case_runs(tmp_path):
    case = _lang_case()
    case["schedule"] = []
    outcome = {"status": "wrong", "phase": "check", "etype": None,
               "msg": "scheduled/threads=1/fence=after: made up for the test"}
    proc = run_reproducer(case, outcome, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.rstrip().endswith("done") and "WRONG" not in proc.stdout


# te.welford and user-written scans ----------------------------------------------------------------

def _scan_case():
    """X (6, 5) float32; a two-state scan (each state reads the other's previous step, the
    second in float64), a one-state scan reading two steps back and a neighbour of the step
    before (a stencil, clamped at the edge), te.welford of X along axis 1."""
    tensors = [
        _ph("X", [6, 5], "float32", [-1.0, 1.0]),
        {"kind": "user_scan", "name": "S", "src": "X", "shape": [6, 5], "lag": 1, "shift": None,
         "act": False, "dtype": "float32", "states": [
             {"name": "S", "dtype": "float32", "init": 1.0, "gain": 1.0,
              "coefs": [[1, 1, 0.5], [0, 1, -0.25]]},
             {"name": "Sb", "dtype": "float64", "init": -1.0, "gain": 0.0,
              "coefs": [[0, 1, 0.375]]}],
         "parts": [{"name": "S", "dtype": "float32", "range": [-16, 16]},
                   {"name": "Sb", "dtype": "float64", "range": [-16, 16]}]},
        {"kind": "user_scan", "name": "R", "src": "X", "shape": [6, 5], "lag": 2,
         "shift": [1, 1], "act": True, "dtype": "float32", "states": [
             {"name": "R", "dtype": "float32", "init": 0.5, "gain": -1.0,
              "coefs": [[0, 1, 0.5], [0, 2, -0.25]]}],
         "parts": [{"name": "R", "dtype": "float32", "range": [-1, 1]}]},
        {"kind": "welford", "name": "W", "src": "X", "axis": 1, "shape": [6], "dtype": "float32",
         "parts": [{"name": "W", "dtype": "float32", "range": [-1, 1]},
                   {"name": "Wv", "dtype": "float32", "range": [0, 1]}]},
    ]
    outputs = ["S", "Sb", "R", "W", "Wv"]
    return {"seed": 5, "tensors": tensors, "outputs": outputs, "args": ["X"] + outputs,
            "schedule": [
                {"p": "axes", "tensor": "S", "axis": ["L1", "L2"], "reduce_axis": []},
                {"p": "split", "tensor": "S", "loop": "L2", "factor": 4, "out": ["L3", "L4"]},
                {"p": "reorder", "tensor": "S", "loops": ["L3", "L1", "L4"]},
                {"p": "parallel", "tensor": "S", "loop": "L3"},
                {"p": "vectorize", "tensor": "S", "loop": "L4"},
                {"p": "split", "tensor": "S", "loop": "L1", "factor": 2, "illegal": True},
                {"p": "axes", "tensor": "R_i0", "axis": ["L5", "L6"], "reduce_axis": []},
                {"p": "axes", "tensor": "R", "axis": ["L7", "L8"], "reduce_axis": []},
                {"p": "compute_at", "tensor": "R_i0", "parent": "R", "loop": "L7"},
                {"p": "vectorize", "tensor": "R", "loop": "L8"},
                {"p": "axes", "tensor": "W", "axis": ["L9"], "reduce_axis": ["L10"]},
                {"p": "split", "tensor": "W", "loop": "L10", "factor": 2, "out": ["L12", "L13"]},
                {"p": "rfactor", "tensor": "W", "loop": "L13", "factor_axis": 0,
                 "out": ["W_rf", "W_rf1", "W_rf2"]},
                {"p": "axes", "tensor": "W_rf", "axis": ["L14", "L15"], "reduce_axis": ["L16"]},
                {"p": "axes", "tensor": "W", "axis": ["L17"], "reduce_axis": ["L18"]},
                {"p": "compute_at", "tensor": "W_rf", "parent": "W", "loop": "L17"},
                {"p": "axes", "tensor": "Wv", "axis": ["L11"], "reduce_axis": []},
                {"p": "parallel", "tensor": "Wv", "loop": "L11"},
            ]}


def _iir_loop(x, coef_of, lag=1, init=1.0, gain=1.0, shift=0, act=False):
    """One state's plain loop (the reference of the reference)."""
    y = np.zeros_like(x)
    y[:lag] = init * x[:lag]
    cols = np.clip(np.arange(x.shape[1]) + shift, 0, x.shape[1] - 1)
    for t in range(lag, len(x)):
        v = gain * x[t] + sum(c * y[t - l][cols] for l, c in coef_of.items())
        y[t] = np.tanh(v) if act else v
    return y


def test_reference_of_welford_and_user_scans_follows_plain_loops():
    case = _scan_case()
    inputs = random_inputs(case, case["seed"])
    want = evaluate(case, inputs)
    x = inputs["X"].astype(np.float64)
    y0, y1 = x.copy(), -x.copy()
    for t in range(1, 6):
        y0[t] = x[t] - 0.25 * y0[t - 1] + 0.5 * y1[t - 1]
        y1[t] = 0.375 * y0[t - 1]
    np.testing.assert_allclose(want["S"].val, y0, rtol=1e-12)
    np.testing.assert_allclose(want["Sb"].val, y1, rtol=1e-12)
    r = _iir_loop(x, {1: 0.5, 2: -0.25}, lag=2, init=0.5, gain=-1.0, shift=1, act=True)
    np.testing.assert_allclose(want["R"].val, r, rtol=1e-12)
    np.testing.assert_allclose(want["W"].val, x.mean(1), rtol=1e-12)
    np.testing.assert_allclose(want["Wv"].val, x.var(1), rtol=1e-9)
    assert (want["S"].err > 0).all() and (want["R"].err > 0).all()


def test_the_scan_case_runs_ok_under_its_schedule():
    """A two-state scan split, parallel and vectorized around its serial scan loop (a split of
    that loop is refused); a stencil scan's init computed at its scan loop; welford's
    reduction rfactored into three rf tensors computed at its loop, its variance parallel."""
    outcome = run_case(_scan_case())
    assert outcome["status"] == "ok", outcome


def test_a_wrong_recurrence_is_caught(monkeypatch):
    """The harness compares the user scan's states: a coefficient changed in the reference
    only makes the case wrong (the error bounds do not hide a wrong recurrence)."""
    from . import reference_lang
    good = reference_lang._KINDS["user_scan"]

    def off(ev, t):
        t = copy.deepcopy(t)
        t["states"][0]["coefs"][0][2] += 0.125
        return good(ev, t)
    monkeypatch.setitem(reference_lang._KINDS, "user_scan", off)
    outcome = run_case(_scan_case())
    assert outcome["status"] == "wrong" and "S:" in outcome["msg"], outcome


def test_a_scan_whose_init_gives_every_step_is_not_a_reader_of_its_source():
    """Found by a campaign (seed 9000089, --lang-rate 0.9): a two-state scan of one step reads
    only its inits, so a cache_read of the source for the scan was refused ('stage S3.v0 does
    not read A'); the generator now knows the scan does not read it."""
    case = make_case(9000089, lang_rate=0.9)
    scan = next(t for t in case["tensors"] if t["kind"] == "user_scan")
    assert scan["shape"][0] <= scan["lag"]
    assert all(scan["name"] not in st.get("readers", ()) for st in case["schedule"]
               if st["p"] == "cache_read" and st["tensor"] == scan["src"])
    outcome = run_case(case)
    assert outcome["status"] == "ok", outcome
