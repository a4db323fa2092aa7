"""The Quick start demo: it auto-schedules its operator (no template), deploys the best schedule
from the log without tuning, checks it against NumPy, and a rerun resumes from the log."""
import re

import pytest

from einloop import autotune, demo
from einloop.errors import TuningError
from einloop.runtime import time_settled


@pytest.fixture
def unsettled_timing(monkeypatch):
    """The demo's timing table without time_settled's pause and warm-up (0.5 s per variant and
    round, 4.5 s a demo): the tests that use this check what the demo prints and deploys, not
    its timings; test_demo_tunes_deploys_and_resumes runs the demo as a user gets it."""
    monkeypatch.setattr(demo, "time_settled",
                        lambda fn, **kw: time_settled(fn, **kw, pause_s=0, warm_s=0))


def measured(out):
    return int(re.search(r"tuned: (\d+) candidates measured", out).group(1))


def test_demo_tunes_deploys_and_resumes(tmp_path, capsys):
    log = str(tmp_path / "dense_relu.jsonl")
    assert demo.main(size=64, trials=4, log=log) == 0
    out = capsys.readouterr().out
    assert 1 <= measured(out) <= 4
    assert "einloop tuned (from log)" in out and "einloop untuned (default)" in out
    assert "all results match NumPy" in out
    records = autotune.load_log(log)
    assert len(records) == measured(out)
    assert all("steps" in r.candidate for r in records), "records hold step lists"

    assert demo.main(size=64, trials=4, log=log) == 0     # the rerun resumes: nothing measured
    out = capsys.readouterr().out
    assert measured(out) == 0
    assert len(autotune.load_log(log)) == len(records)


def test_demo_operator_is_a_plain_function():
    """No template: the demo's operator is a function returning its tensors, outputs last."""
    tensors = demo.dense_relu(8, 16, 4)
    assert [t.name for t in tensors] == ["X", "W", "bias", "Out"]
    assert not hasattr(demo.dense_relu, "template_name")


def test_demo_with_zero_trials_deploys_from_the_log(tmp_path, capsys, unsettled_timing):
    log = str(tmp_path / "dense_relu.jsonl")
    assert demo.main(size=32, trials=2, log=log) == 0
    capsys.readouterr()
    records = autotune.load_log(log)
    assert demo.main(size=32, trials=0, log=log) == 0
    out = capsys.readouterr().out
    assert re.search(r"no tuning \(--trials 0\): [1-9]\d* measured schedules", out), out
    assert "einloop tuned (from log)" in out and "all results match NumPy" in out
    assert len(autotune.load_log(log)) == len(records)        # nothing measured


def test_demo_with_zero_trials_and_nothing_logged_says_so(tmp_path, capsys, monkeypatch,
                                                            unsettled_timing):
    """From the CLI: one line, exit code 2, no tuning, no log written; a log of another size
    does not count."""
    from einloop.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--trials", "0", "--size", "32"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing to deploy" in err and "--trials N" in err
    assert not (tmp_path / "tuning_logs").exists()
    log = str(tmp_path / "other.jsonl")
    assert demo.main(size=16, trials=1, log=log) == 0
    with pytest.raises(TuningError, match=r"nothing to deploy: .*other\.jsonl holds no measured "
                                          r"schedule of relu\(X @ W \+ bias\) at size 32"):
        demo.main(size=32, trials=0, log=log)
    with pytest.raises(TuningError, match=r"--trials must be a whole number >= 0"):
        demo.main(size=32, trials=-1, log=log)
