"""torch.compile(backend="einloop") with dynamo's dynamic shapes: a graph with symbolic sizes is
compiled once, its sizes te.size_vars (einloop/torch/symbolic.py), and its kernels run at every
size.  An MLP and an attention block equal to eager at batches 1, 7 and 64 (and sequence
lengths), with as many kernel compilations after ten sizes as after the first; a log tuned at
two batch sizes used at one between them; a graph the symbolic path cannot take, compiled per
size and still right; tune_model's misused shape_hints refused."""
import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import einloop.codegen.build as codegen_build
import einloop.torch as et
from einloop.autotune import UntunedScheduleWarning
from einloop.errors import ArgumentError
from einloop.schedule.dispatch import SizeDispatch
from einloop.torch import backend as be
from einloop.torch import symbolic
from einloop.torch.decompositions import decompositions

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import bench_symbolic  # noqa: E402

torch.manual_seed(0)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(12, 24), torch.nn.Linear(24, 5)

    def forward(self, x):
        return torch.softmax(self.b(F.gelu(self.a(x))), -1)


def Attention():
    """bench_symbolic's attention block at d = 16 with 2 heads."""
    return bench_symbolic.Attention(d=16, heads=2)


@pytest.fixture
def compilations(monkeypatch):
    """The number of kernels compiled so far (each a request to LLVM, or to the compile
    cache that spares it); the symbolic kernels run (calls of SymbolicKernel.run); and the
    calls of the per-size fallback."""
    seen = {"compiled": 0, "symbolic runs": 0, "per size": 0}
    compile_func, run, per_size = (codegen_build.compile_func, symbolic.SymbolicKernel.run,
                                   be.PerSizeGraph.__call__)

    def counted(*a, **k):
        seen["compiled"] += 1
        return compile_func(*a, **k)

    def counted_run(self, env):
        seen["symbolic runs"] += 1
        return run(self, env)

    def counted_per_size(self, *a):
        seen["per size"] += 1
        return per_size(self, *a)
    monkeypatch.setattr(codegen_build, "compile_func", counted)
    monkeypatch.setattr(symbolic.SymbolicKernel, "run", counted_run)
    monkeypatch.setattr(be.PerSizeGraph, "__call__", counted_per_size)
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()


def _check(compiled, model, shape):
    x = torch.randn(*shape)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_mlp_compiles_once_for_every_batch(compilations):
    model = MLP().eval()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        _check(compiled, model, (7, 12))
        after_first = compilations["compiled"]
        for batch in (64, 37, 101, 7, 2):
            _check(compiled, model, (batch, 12))
        assert compilations["compiled"] == after_first > 0
        _check(compiled, model, (1, 12))            # dynamo specialises a batch of 1: static
    assert compilations["symbolic runs"] > 0 and compilations["per size"] == 0


def test_attention_compiles_once_for_every_batch_and_sequence_length(compilations):
    model = Attention().eval()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)    # chunk's split runs in PyTorch
        _check(compiled, model, (7, 5, 16))
        after_first = compilations["compiled"]
        for batch, seq in ((64, 5), (7, 11), (2, 37), (3, 2)):
            _check(compiled, model, (batch, seq, 16))
        assert compilations["compiled"] == after_first > 0
        _check(compiled, model, (1, 5, 16))         # a batch of 1: its sequence still symbolic
    assert compilations["symbolic runs"] > 0 and compilations["per size"] == 0


def test_mark_dynamic_makes_only_that_dimension_symbolic(compilations):
    model = MLP().eval()
    compiled = torch.compile(model, backend="einloop")
    x = torch.randn(7, 12)
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    after_first = compilations["compiled"]
    _check(compiled, model, (64, 12))
    assert compilations["compiled"] == after_first and compilations["symbolic runs"] > 0


class Shifted(torch.nn.Module):
    """The second half of the batch: a slice from a symbolic start, which einloop declares
    with static starts only: the graph cannot be symbolic."""

    def forward(self, x):
        return torch.relu(x[x.shape[0] // 2:] * 2.0 + 1.0)


class Neighbours(torch.nn.Module):
    """Slices of the symbolic batch from static starts (from either end, with a step)."""

    def forward(self, x):
        return x[1:] * 2.0 + x[:-1] - x[-3:].sum(), x[::2] * 3.0


def test_slices_from_static_starts_of_a_symbolic_dimension_stay_symbolic(compilations):
    model = Neighbours()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        for batch in (7, 64, 9):
            _check(compiled, model, (batch, 5))
    assert compilations["symbolic runs"] > 0 and compilations["per size"] == 0


def test_a_graph_that_cannot_be_symbolic_is_compiled_per_size_and_right(compilations,
                                                                       caplog):
    model = Shifted()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with caplog.at_level("DEBUG", logger="einloop.torch"), \
            pytest.warns(be.BackendWarning, match="compiled again at each new size"):
        _check(compiled, model, (7, 5))
    assert "compiled per call size" in caplog.text
    for batch in (64, 9):
        _check(compiled, model, (batch, 5))
    assert compilations["per size"] == 3 and compilations["symbolic runs"] == 0


def test_the_symbolic_path_says_so_in_the_debug_log(compilations, caplog):
    model = MLP().eval()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with caplog.at_level("DEBUG", logger="einloop.torch"):
        _check(compiled, model, (7, 12))
    assert "is compiled once, its kernels over size variables" in caplog.text


def test_products_over_flattened_dimensions_are_folded_and_equal_eager():
    """The attention block's ATen graph (traced with symbolic sizes): its two bmm (over batch
    x heads) and, folding linear layers too, its two addmm (over batch x sequence rows) become
    matmuls over the leading dimensions (no kernel then has a flattened size only inside
    it); compiled once by compile_symbolic (which folds the linear layers only where a
    kernel needs it), it equals eager at several sizes."""
    model = Attention().eval()
    with torch.no_grad():
        gm = make_fx(model, tracing_mode="symbolic", decomposition_table=decompositions(),
                     _allow_non_fake_inputs=True)(torch.randn(3, 5, 16))
    assert symbolic.fold_batched_products(be._copy(gm).graph, linear=False) == 2  # the bmm
    work = be._copy(gm)
    assert symbolic.fold_batched_products(work.graph) == 4
    assert not any(n.target in (torch.ops.aten.bmm.default, torch.ops.aten.addmm.default)
                   for n in work.graph.nodes)
    fn = be.compile_symbolic(gm, None)          # the parameters are the graph's constants
    assert not isinstance(fn, be.PerSizeGraph)
    for shape in ((3, 5, 16), (7, 2, 16), (2, 13, 16)):
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(fn(x), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_layer_with_dynamic_shapes_equals_eager(batch_first, compilations):
    """batch_first: the symbolic path; sequence first (PyTorch's default layout), its
    attention flattens batch and heads in the middle of a kernel (a size no argument has):
    compiled per size, still equal to eager."""
    model = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=24,
                                             dropout=0.0, batch_first=batch_first).eval()
    compiled = torch.compile(model, backend="einloop", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        for batch, seq in ((3, 6), (5, 11)):
            _check(compiled, model, (batch, seq, 16) if batch_first else (seq, batch, 16))
    if batch_first:
        assert compilations["symbolic runs"] > 0 and compilations["per size"] == 0
    else:
        assert compilations["per size"] == 2


def test_the_symbolic_option_must_be_a_bool():
    with pytest.raises(ArgumentError, match=r"'symbolic': 'yes'.*give True .* or False"):
        be.einloop_backend(None, [], options={"symbolic": "yes"})


def test_a_log_tuned_at_two_batches_is_used_between_them(tmp_path, compilations, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU()).eval()
    log = str(tmp_path / "mlp.jsonl")
    x = torch.randn(8, 12)
    with torch.no_grad():
        progress = et.tune_model(model, (x,), n_trial=4, log=log, quiet=True, dynamic=True,
                                 shape_hints={8: [4, 32]})
    assert [tp.mt.hints for tp in progress] == [{next(iter(progress[0].mt.hints)): [4, 32]}]
    dispatches = []
    schedule = be._dispatch

    def spy(tensors, log, hints=None):
        s = schedule(tensors, log, hints)
        dispatches.append(s)
        return s
    monkeypatch.setattr(be, "_dispatch", spy)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="einloop", dynamic=True, options={"log": log})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntunedScheduleWarning)
        warnings.simplefilter("error", be.BackendWarning)
        _check(fast, model, (16, 12))
    (s,) = dispatches
    assert isinstance(s, SizeDispatch)
    assert sorted(p[name] for p, _ in s.cases for name in p) == [4, 32]


def test_bad_shape_hints_say_what_is_wrong(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU()).eval()
    x = torch.randn(8, 12)
    log = str(tmp_path / "l.jsonl")
    with torch.no_grad():
        with pytest.raises(ArgumentError, match="shape_hints must be a dict"):
            et.tune_model(model, (x,), n_trial=1, log=log, dynamic=True, shape_hints=[4, 32])
        with pytest.raises(ArgumentError, match=r"shape_hints\[8\] must be a list of sizes"):
            et.tune_model(model, (x,), n_trial=1, log=log, dynamic=True, shape_hints={8: [0]})
        with pytest.raises(ArgumentError, match="no dynamic dimension"):
            et.tune_model(model, (x,), n_trial=1, log=log, dynamic=True, shape_hints={9: [4]})
