"""Consecutive einloop kernels of a partition run by one native call (KernelRun): equal to
eager, with intermediates in an arena, outputs and tensors read later handed back, kernels on
either side of an operator left to PyTorch, scalars, and calls from several threads at once."""
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

from einloop.codegen.sequence import KernelSequence, Place, Slot, Step
from einloop.errors import InternalError
from einloop.torch import backend as be
from einloop.torch.kernel_run import KernelRun

from test_backend import lowered, r

torch.manual_seed(0)


def _part(compiled):
    (part,) = [m for m in compiled.modules() if isinstance(m, be.PartitionModule)]
    return part


def _mlp(x, w1, b1, w2, b2, w3):
    h = F.relu(F.linear(x, w1, b1))
    h = torch.tanh(F.linear(h, w2, b2))
    return F.linear(h, w3)


def test_a_chain_of_layers_is_one_run_equal_to_eager():
    args = (r(5, 12), r(16, 12), r(16), r(9, 16), r(9), r(4, 9))
    compiled, left = lowered(_mlp, *args)
    part = _part(compiled)
    assert left == [] and len(part.kernels) == 1 and isinstance(part.kernels[0], KernelRun)
    run = part.kernels[0]
    assert len(run.kernels) == 3
    # x, the weights and biases are read; only the last layer's result is handed back
    assert len(run.inputs) == 6 and len(run.outputs) == 1
    assert run.arena_nbytes > 0
    for _ in range(3):                          # the arena is fresh each call
        torch.testing.assert_close(compiled(*args), _mlp(*args), rtol=1e-4, atol=1e-5)


def test_an_intermediate_the_graph_returns_is_handed_back_and_still_read():
    def fn(x, w1, w2):
        h = torch.sigmoid(F.linear(x, w1))
        return F.linear(h, w2).sum(), h        # h: an output and read by the next kernel
    args = (r(3, 8), r(10, 8), r(6, 10))
    compiled, left = lowered(fn, *args)
    run = _part(compiled).kernels[0]
    assert left == [] and isinstance(run, KernelRun) and len(run.outputs) == 2
    got, want = compiled(*args), fn(*args)
    assert got[0].shape == () and got[1].shape == (3, 10)       # the sum is a 0-d tensor
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_kernels_around_an_operator_left_to_pytorch_run_on_either_side():
    def fn(x, w):
        h = F.gelu(F.linear(x, w)) * 2.0
        s = torch.sort(h, dim=1).values        # einloop has no sort: PyTorch runs it
        return torch.relu(s - 1.0) + h
    args = (r(4, 6), r(7, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        compiled, left = lowered(fn, *args)
        got = compiled(*args)
    assert any("sort" in op for op in left)
    torch.testing.assert_close(got, fn(*args), rtol=1e-4, atol=1e-5)


def test_calls_from_several_threads_at_once_are_each_right():
    args = (r(33, 40), r(48, 40), r(48), r(24, 48), r(24), r(8, 24))
    compiled, _ = lowered(_mlp, *args)
    assert isinstance(_part(compiled).kernels[0], KernelRun)
    inputs = [tuple(a * (1 + i / 10) for a in args) for i in range(4)]
    wants = [_mlp(*a) for a in inputs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                torch.testing.assert_close(compiled(*inputs[i]), wants[i], rtol=1e-4, atol=1e-4)
        except Exception as exc:               # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_run_that_cannot_be_built_runs_its_kernels_one_by_one(monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("no sequence today")
    monkeypatch.setattr(be, "KernelRun", broken)
    args = (r(5, 12), r(16, 12), r(16), r(9, 16), r(9), r(4, 9))
    with pytest.warns(be.BackendWarning, match="run one by one.*no sequence today"):
        compiled, _ = lowered(_mlp, *args)
    part = _part(compiled)
    assert len(part.kernels) == 3 and all(isinstance(k, be.Kernel) for k in part.kernels)
    torch.testing.assert_close(compiled(*args), _mlp(*args), rtol=1e-4, atol=1e-5)


def test_a_sequence_refuses_slots_that_do_not_fit_its_kernels():
    args = (r(5, 12), r(16, 12), r(16), r(9, 16), r(9), r(4, 9))
    compiled, _ = lowered(_mlp, *args)
    kernel = _part(compiled).kernels[0].kernels[0].call.kernel
    with pytest.raises(InternalError, match="slots for"):
        KernelSequence([Step(kernel, (Slot(Place.IO, 0),))], 1)
    n = len(kernel.signature.args) + len(kernel.temp_nbytes)
    with pytest.raises(InternalError, match="io slot beyond 2"):
        KernelSequence([Step(kernel, tuple(Slot(Place.IO, i) for i in range(n)))], 2)


def test_reshapes_between_kernels_stay_in_the_run_and_the_graph_gets_its_views():
    def fn(x, w1, w2):
        h = torch.relu(F.linear(x, w1))                 # 6 x 10
        g = F.linear(h.reshape(3, 20), w2)              # read with another shape
        return torch.tanh(g) * 2.0, h.reshape(2, 30)   # the reshaped h is an output too
    args = (r(6, 8), r(10, 8), r(5, 20))
    compiled, left = lowered(fn, *args)
    part = _part(compiled)
    runs = [k for k in part.kernels if isinstance(k, KernelRun)]
    assert left == [] and len(runs) == 1 and len(runs[0].kernels) >= 2
    for g, w in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_the_sequence_driver_comes_from_the_compile_cache_like_the_kernels(fresh, monkeypatch):
    """What a deployed process needs to start without LLVM: built again with an empty in-process
    memo, the three kernels and their sequence's driver are all persistent-cache hits."""
    from einloop.codegen import cache, jit
    args = (r(5, 12), r(16, 12), r(16), r(9, 16), r(9), r(4, 9))
    lowered(_mlp, *args)
    misses, hits = cache.stats.misses, cache.stats.hits
    assert misses >= 4                          # three kernels and the driver, compiled
    monkeypatch.setattr(jit, "_cache", {})
    compiled, _ = lowered(_mlp, *args)
    assert cache.stats.misses == misses and cache.stats.hits >= hits + 4
    torch.testing.assert_close(compiled(*args), _mlp(*args), rtol=1e-4, atol=1e-5)
