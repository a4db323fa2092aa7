"""et.tune: the forward and gradient kernels of a custom op tuned into one log, which a fresh
process replays for forward and backward without measuring anything."""
import os
import sys

import pytest
import torch

import einloop.torch as et
from einloop.autotune.log import record
from einloop.errors import CustomOpError
from isolated import run_isolated

import torch_ops

HERE = os.path.dirname(os.path.abspath(__file__))


def test_tune_records_every_kernel_and_a_fresh_process_replays_them(tmp_path):
    log = str(tmp_path / "rmsnorm.jsonl")
    op = et.custom_op("einloop_tune_test::rmsnorm")(torch_ops.rmsnorm)
    x, w = torch.randn(16, 32), torch.randn(32)
    tuned = et.tune(op, (x, w), n_trial=10, log=log, seed=0, quiet=True)
    labels = [label for label, _ in tuned]
    assert labels[:2] == ["forward", "forward saving ss"], labels
    assert len(labels) > 2 and all(lb.startswith("gradient kernel") for lb in labels[2:])
    records = record.load(log)
    assert len({r.workload for r in records}) == len(labels) and all(r.ok for r in records)
    out = run_isolated(f"""
        import sys, warnings
        sys.path.insert(0, {HERE!r})
        import torch
        import einloop.torch as et
        from einloop import autotune
        from einloop.autotune import api
        import torch_ops

        def no_tuning(*a, **k):
            raise AssertionError("replaying must not tune")
        api.make_tuner = api.tune = no_tuning
        warnings.simplefilter("error", autotune.UntunedScheduleWarning)   # the log has both
        op = et.custom_op("einloop_tune_test::rmsnorm", log={log!r})(torch_ops.rmsnorm)
        x = torch.randn(16, 32, requires_grad=True)
        w = torch.randn(32, requires_grad=True)
        op(x, w).sum().backward()
        xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        (xr / torch.sqrt((xr * xr).mean(1, keepdim=True) + 1e-6) * wr).sum().backward()
        assert torch.allclose(x.grad, xr.grad, atol=1e-4) and torch.allclose(w.grad, wr.grad, atol=1e-3)
        print("replayed")
    """, timeout=300)
    assert "replayed" in out


def test_tune_needs_a_custom_op_and_a_log():
    op = et.custom_op("einloop_tune_test::rmsnorm_nolog")(torch_ops.rmsnorm)
    with pytest.raises(CustomOpError, match="log=PATH"):
        et.tune(op, (torch.randn(4, 8), torch.randn(8)), n_trial=2, log=None)
    with pytest.raises(CustomOpError, match="custom_op"):
        et.tune(torch_ops.rmsnorm, (torch.randn(4, 8), torch.randn(8)), n_trial=2, log="x")


def test_tuning_measures_at_the_thread_count_the_operator_runs_with(tmp_path, monkeypatch):
    """The measuring processes get torch's thread count (which einloop.torch's kernels follow)
    through EINLOOP_NUM_THREADS while tuning, and the variable is the user's again after."""
    tune_module = sys.modules["einloop.torch.tune"]     # the name einloop.torch.tune is the function
    seen = []

    def recording(*args, **kwargs):
        seen.append(os.environ.get("EINLOOP_NUM_THREADS"))
        raise tune_module.NoValidTrialError("recorded")
    monkeypatch.setattr(tune_module, "auto_schedule", recording)
    monkeypatch.delenv("EINLOOP_NUM_THREADS", raising=False)
    op = et.custom_op("einloop_tune_test::rmsnorm_threads")(torch_ops.rmsnorm)
    with pytest.warns(UserWarning):
        et.tune(op, (torch.randn(4, 8), torch.randn(8)), n_trial=2, log=str(tmp_path / "l"),
                quiet=True, backward=False)
    assert seen == [str(torch.get_num_threads())]
    assert "EINLOOP_NUM_THREADS" not in os.environ
    monkeypatch.setenv("EINLOOP_NUM_THREADS", "1")          # the user's choice decides
    seen.clear()
    with pytest.warns(UserWarning):
        et.tune(op, (torch.randn(4, 8), torch.randn(8)), n_trial=2, log=str(tmp_path / "l"),
                quiet=True, backward=False)
    assert seen == ["1"] and os.environ["EINLOOP_NUM_THREADS"] == "1"
