"""A logged schedule that no longer applies (a step that fails with this version of einloop: an
intrinsic or a primitive that changed since the log was written) is never raised at deploy
time: the fastest logged schedule that still applies is deployed, with one
StaleRecordWarning, or the default schedule when none does."""
import json
import warnings

import numpy as np
import pytest

from einloop import build, te
from einloop.autotune import StaleRecordWarning, UntunedScheduleWarning, auto_schedule

BAD_STEP = {"kind": "split", "stage": "B", "args": {"axis": "no_such_loop", "factor": 4}}


def _double():
    A = te.placeholder((64, 48), "float32", name="A")
    B = te.compute((64, 48), lambda i, j: A[i, j] * 2, name="B")
    return [A, B]


def _stale(path, which):
    """Rewrite the log's records *which* (indices, or "all") as step lists with a step that
    fails, each faster than any other record."""
    lines = [json.loads(x) for x in open(path)]
    for n, d in enumerate(lines):
        if which == "all" or n in which:
            d.pop("config_index", None)
            d["steps"] = d["steps"] + [BAD_STEP]
            d["result"]["costs"] = [1e-9]
    with open(path, "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in lines)
    return lines


def _deploy(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s, args = auto_schedule(_double(), log=str(path))
    f = build(s, args)
    a = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
    out = np.empty_like(a)
    f(a, out)
    np.testing.assert_array_equal(out, a * 2)
    return s, [w for w in caught if issubclass(w.category, (StaleRecordWarning,
                                                              UntunedScheduleWarning))]


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("stale") / "double.jsonl"
    auto_schedule(_double(), n_trial=4, log=str(path), seed=0, quiet=True)
    return path


def test_the_fastest_schedule_that_applies_is_deployed(log, tmp_path):
    path = tmp_path / "one_stale.jsonl"
    path.write_text(log.read_text())
    lines = _stale(path, [0])
    others = sorted(lines[1:], key=lambda d: np.mean(d["result"]["costs"]))
    s, caught = _deploy(path)
    assert [w.category for w in caught] == [StaleRecordWarning]
    assert "no_such_loop" in str(caught[0].message)
    assert "deploying the fastest logged schedule that applies" in str(caught[0].message)
    assert [st.kind.value for st in s.steps] == [st["kind"] for st in others[0]["steps"]]


def test_none_applies_deploys_the_default_schedule(log, tmp_path):
    path = tmp_path / "all_stale.jsonl"
    path.write_text(log.read_text())
    _stale(path, "all")
    _, caught = _deploy(path)
    kinds = [w.category for w in caught]
    assert StaleRecordWarning in kinds and UntunedScheduleWarning in kinds
    assert any("none of its" in str(w.message) for w in caught)
