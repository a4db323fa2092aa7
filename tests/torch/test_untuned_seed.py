"""An untuned kernel of the backend (no log, or a log without it) runs the auto-scheduler's
first seed schedule, not the default schedule that tiles nothing (einloop/torch/backend.py,
``_schedules``); where the seed does not build, the default does.  Results equal eager at odd
sizes either way."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from einloop.errors import BuildError
from einloop.torch import backend as be

from test_backend import traced

torch.manual_seed(0)


def _kernel_tensors(fn, *inputs):
    """The te tensors of the one kernel of *fn* (a product and its epilogue)."""
    gm = traced(fn, *inputs)
    support = be.EinloopSupport()
    nodes = [n for n in gm.graph.nodes if support.is_node_supported(None, n)]
    (group,) = [g for g in be.group_nodes(nodes) if len(g) > 1]
    sinks = [n for n in group if any(u.op == "output" for u in n.users)]
    return be.declare_kernel(group, sinks)[1]


def linear_relu(x, w, b):
    return torch.relu(F.linear(x, w, b))


def _steps(s):
    return [str(st) for st in s.steps]


def test_without_a_log_the_seed_schedule_comes_first_then_the_default():
    tensors = _kernel_tensors(linear_relu, torch.randn(37, 24), torch.randn(101, 24),
                              torch.randn(101))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, default = be._schedules(tensors, None)
    seed = be.seed_schedule(tensors)
    assert _steps(first) == _steps(seed) != _steps(default)
    assert any("split" in st for st in _steps(first))          # tiled


def test_a_linear_layer_with_the_seed_schedule_equals_eager():
    x, w, b = torch.randn(101, 37), torch.randn(21, 37), torch.randn(21)
    forward = be.compile_graph(traced(linear_relu, x, w, b), (x, w, b))
    got = forward(x, w, b)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got, linear_relu(x, w, b), rtol=1e-4, atol=1e-4)


def test_where_the_seed_does_not_build_the_default_does(monkeypatch):
    x, w, b = torch.randn(13, 37), torch.randn(21, 37), torch.randn(21)
    tensors = _kernel_tensors(linear_relu, x, w, b)
    real, calls = be._compiled, []

    def failing_first(s, *args, **kwargs):
        calls.append(s)
        if len(calls) == 1:
            raise BuildError("a seed that does not build (test)")
        return real(s, *args, **kwargs)
    monkeypatch.setattr(be, "_compiled", failing_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forward = be.compile_graph(traced(linear_relu, x, w, b), (x, w, b))
    assert len(calls) == 2 and _steps(calls[1]) == _steps(be._schedules(tensors, None)[1])
    got = forward(x, w, b)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got, linear_relu(x, w, b), rtol=1e-4, atol=1e-4)


def test_a_log_without_the_kernel_notices_it_once(tmp_path):
    log = tmp_path / "other.jsonl"
    log.write_text("")
    x, w, b = torch.randn(9, 37), torch.randn(11, 37), torch.randn(11)
    with pytest.warns(be.BackendWarning, match="no schedule for some of this model's kernels"):
        forward = be.compile_graph(traced(linear_relu, x, w, b), (x, w, b), log=str(log))
    got = forward(x, w, b)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got, linear_relu(x, w, b), rtol=1e-4, atol=1e-4)
