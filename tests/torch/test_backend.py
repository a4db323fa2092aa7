"""torch.compile(backend="einloop"): the ATen table op by op against eager PyTorch (every op
checked to run as an einloop kernel, not in PyTorch), three models equal to eager (an MLP, a
TransformerEncoderLayer on its inference fast path, a small CNN), a model with an operator
einloop lacks (it runs, partly in PyTorch), training (gradients through the compiled forward),
and the backend found by name through its entry point."""
import operator
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from einloop.errors import Error, IndexRangeError
from einloop.torch import backend as be
from einloop.torch.index_checks import check_indices
from einloop.torch.decompositions import decompositions

torch.manual_seed(0)


def traced(fn, *inputs):
    """*fn* traced to ATen with the backend's decompositions, as aot_autograd leaves it."""
    gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake")(*inputs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def lowered(fn, *inputs):
    """*fn* traced to ATen (the backend's decompositions) and compiled by the backend: ``(the
    compiled graph module, the ATen ops left to PyTorch)``."""
    gm = traced(fn, *inputs)
    forward = be.compile_graph(gm, inputs)
    compiled = getattr(forward, "__self__", gm)
    left = [str(n.target) for n in compiled.graph.nodes
            if n.op == "call_function" and n.target not in (operator.getitem, check_indices)]
    return compiled, left


def r(*shape):
    return torch.randn(*shape)


def pos(*shape):
    return torch.rand(*shape) + 0.1


OPS = {
    "add broadcast": (lambda a, b: a + b, (r(3, 5, 7), r(5, 1))),
    "add alpha": (lambda a, b: torch.add(a, b, alpha=0.5), (r(4, 7), r(7))),
    "sub scalar": (lambda a: a - 1.5, (r(4, 7),)),
    "rsub": (lambda a: 2.0 - a, (r(4, 7),)),
    "mul div": (lambda a, b: a * b / (b * b + 1.0), (r(3, 7), r(3, 7))),
    "maximum minimum": (lambda a, b: torch.minimum(torch.maximum(a, b), a * 0.5), (r(5, 6), r(6))),
    "pow": (lambda a: a ** 3 + a.pow(2.0), (r(4, 5),)),
    "integer pow": (lambda a: a ** 2 + a ** 3 - a ** 0, (torch.arange(-6, 6).reshape(3, 4),)),
    "where compare": (lambda a, b: torch.where(a > b, a, b * 2) + (a <= 0.3).float(),
                      (r(4, 9), r(9))),
    "compare int": (lambda a: (a.int() >= 1).float() + (a.int() == 0).float(), (r(6, 5) * 3,)),
    "relu gelu": (lambda a: F.relu(a) + F.gelu(a) + F.gelu(a, approximate="tanh"), (r(5, 7),)),
    "silu sigmoid tanh": (lambda a: F.silu(a) * torch.sigmoid(a) - torch.tanh(a), (r(5, 7),)),
    "exp log sqrt rsqrt": (lambda a: torch.exp(-a) + torch.log(a) + a.sqrt() * a.rsqrt(),
                           (pos(5, 7),)),
    "erf neg abs": (lambda a: torch.erf(a) - (-a).abs(), (r(5, 7),)),
    "casts": (lambda a: a.double() * 2 + a.int().double(), (r(5, 7) * 4,)),
    "view permute": (lambda a: a.view(2, 3, 20).permute(2, 0, 1).reshape(20, 6) * 2, (r(6, 4, 5),)),
    "transpose t": (lambda a, b: a.transpose(0, 1) * 2 + b.t(), (r(5, 3), r(5, 3))),
    "expand unsqueeze": (lambda a: a.unsqueeze(0).expand(4, 5, 6) * 1.0 + a[None, :, :1],
                         (r(5, 6),)),
    "squeeze": (lambda a: a.squeeze(1) * 2 + a.squeeze() * 3, (r(5, 1, 6),)),
    "slice select": (lambda a: a[:, 1:-1:2] * 2 + a[:, 0:3].sum(1, keepdim=True)
                     + a.select(1, -1).unsqueeze(1), (r(4, 9),)),
    "cat": (lambda a, b: torch.cat([a, b * 2, a], dim=-1) + 1, (r(3, 4), r(3, 2))),
    "sum mean": (lambda a: a.sum((0, 2)) + a.mean(-1).sum(0) + a.sum(1, keepdim=True).mean(2)[0],
                 (r(4, 5, 6),)),
    "0-d results": (lambda a: a.sum() * 2 + a.mean() + a[0, 0], (r(4, 5),)),
    "amax amin var": (lambda a: a.amax(1) - a.amin(1) + a.var(1) + a.var(1, correction=0),
                      (r(4, 7),)),
    "softmax": (lambda a: torch.softmax(a, 1) + F.log_softmax(a, -1), (r(3, 5, 7),)),
    "safe softmax": (lambda a, m: torch.ops.aten._safe_softmax.default(
        torch.where(m, float("-inf"), a), -1), (r(3, 5), torch.tensor([[False], [True], [False]]))),
    "any logical_not full_like": (lambda a: torch.logical_not(torch.any(a > 0.5, dim=1)).float()
                                  + torch.full_like(a, 2.0).sum(1), (r(3, 5),)),
    "layer norm": (lambda a, w, b: F.layer_norm(a, (7,), w, b) + F.layer_norm(a, (5, 7)),
                   (r(3, 5, 7), r(7), r(7))),
    "layer norm statistics": (lambda a, w, b: sum(torch.ops.aten.native_layer_norm(
        a, [7], w, b, 1e-5)), (r(3, 5, 7), r(7), r(7))),
    "batch norm": (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3),
                   (r(2, 4, 5, 3), r(4), pos(4), r(4), r(4))),
    "mm bmm addmm": (lambda a, b, c: torch.bmm(c, c.transpose(1, 2)).sum(0) @ a
                     + torch.addmm(b[0], a, b.t(), beta=0.5, alpha=2.0)[:, :1],
                     (r(5, 7), r(7, 7), r(3, 5, 4))),
    "linear": (lambda x, w, b: F.linear(x, w, b), (r(2, 3, 9), r(5, 9), r(5))),
    "matmul broadcast": (lambda a, b: a @ b, (r(2, 3, 4, 5), r(3, 5, 6))),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
               (r(2, 4, 17), r(6, 4, 3), r(6))),
    "conv2d groups": (lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=1, groups=2),
                      (r(1, 4, 9, 8), r(6, 2, 3, 3))),
    "depthwise": (lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=4),
                  (r(1, 4, 9, 8), r(4, 1, 3, 3))),
    "pooling": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True).sum((2, 3))
                + F.avg_pool2d(x, 2).mean((2, 3)) + F.adaptive_avg_pool2d(x, (3, 2)).sum((2, 3)),
                (r(2, 3, 11, 9),)),
    "elementwise gradients": (lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.0)
                              + torch.ops.aten.gelu_backward(g, x)
                              + torch.ops.aten.gelu_backward(g, x, approximate="tanh")
                              + torch.ops.aten.silu_backward(g, x)
                              + torch.ops.aten.sigmoid_backward(g, torch.sigmoid(x))
                              + torch.ops.aten.tanh_backward(g, torch.tanh(x)), (r(4, 6), r(4, 6))),
    "softmax gradients": (lambda g, x: torch.ops.aten._softmax_backward_data(
        g, torch.softmax(x, 1), 1, torch.float32) + torch.ops.aten._log_softmax_backward_data(
        g, F.log_softmax(x, -1), -1, torch.float32), (r(3, 5, 4), r(3, 5, 4))),
    "embedding": (lambda t, i: F.embedding(i, t) * 2, (r(10, 6), torch.tensor([[1, 9], [0, 3]]))),
    "embedding backward": (lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 10, 3, False)
                           * 2, (r(2, 5, 6), torch.tensor([[1, 9, 3, 1, 1], [0, 3, 9, 9, 2]]))),
    "index_add": (lambda x, i, s: x.index_add(1, i, s, alpha=0.5) + 1,
                  (r(3, 7, 2), torch.tensor([4, 0, 4, 6]), r(3, 4, 2))),
}


@pytest.mark.parametrize("name", list(OPS))
def test_aten_op_runs_as_an_einloop_kernel_equal_to_eager(name):
    fn, inputs = OPS[name]
    compiled, left = lowered(fn, *inputs)
    assert left == [], f"{name}: left to PyTorch: {left}"
    eager = [st for m in compiled.modules() if isinstance(m, be.PartitionModule)
             for st in m.steps if isinstance(st, be.EagerKernel)]
    assert eager == [], f"{name}: kernels that could not be built run in PyTorch"
    want = fn(*inputs)
    got = compiled(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_an_unsupported_operator_runs_in_pytorch_and_the_rest_as_kernels():
    def fn(x):
        return torch.sort(torch.relu(x) * 2, dim=-1).values + 1
    x = r(4, 9)
    compiled, left = lowered(fn, x)
    assert left == ["aten.sort.default"]
    torch.testing.assert_close(compiled(x), fn(x))
    assert any(isinstance(m, be.PartitionModule) for m in compiled.modules())


def test_a_graph_with_nothing_einloop_runs_says_so_once(monkeypatch):
    monkeypatch.setattr(be, "_noticed", set())
    x = r(4, 9)
    with pytest.warns(be.BackendWarning, match="1 kind.* of operators run in PyTorch: "
                                               "aten.sort.default"):
        compiled, left = lowered(lambda x: torch.sort(x, dim=-1).values, x)
    assert left == ["aten.sort.default"]
    torch.testing.assert_close(compiled(x), torch.sort(x, dim=-1).values)


def test_a_kernel_that_cannot_be_built_is_named_by_its_operator(monkeypatch):
    """The notice names the ATen operator and the graph's node, not FX's dump of the node."""
    monkeypatch.setattr(be, "_noticed", set())

    def broken(*_):
        raise be.ArgumentError("no lowering today")
    low = be.LOWERINGS[torch.ops.aten.relu.default]
    monkeypatch.setitem(be.LOWERINGS, torch.ops.aten.relu.default, low._replace(lower=broken))
    x = r(5, 6)
    with pytest.warns(be.BackendWarning) as caught:
        compiled, _ = lowered(lambda a: torch.relu(a), x)
    message = str(caught[0].message)
    assert "aten.relu.default (node relu)" in message and "call_function" not in message
    torch.testing.assert_close(compiled(x), torch.relu(x))


def test_indices_out_of_range_raise_as_in_pytorch():
    """An embedding id or an index_add index out of range is an IndexError there, and here an
    IndexRangeError (an IndexError too) naming it, not a clamped row; in range, the kernels run
    as before."""
    w = r(10, 4)
    lookup = torch.compile(lambda i: F.embedding(i, w) * 2, backend="einloop")
    ids = torch.tensor([[3, 9], [0, 1]])
    torch.testing.assert_close(lookup(ids), F.embedding(ids, w) * 2)
    for bad, shown in (([10], "index 10 "), ([[2, -1]], "index -1 ")):
        with pytest.raises(IndexRangeError, match=f"aten.embedding.default: {shown}.* size 10"):
            lookup(torch.tensor(bad))
    x, rows = torch.zeros(5, 3), r(3, 3)
    add = torch.compile(lambda x, i, s: x.index_add(0, i, s), backend="einloop")
    good = torch.tensor([0, 4, 1])
    torch.testing.assert_close(add(x, good, rows), x.index_add(0, good, rows))
    with pytest.raises(IndexError, match="aten.index_add.default: index 5 .* size 5"):
        add(x, torch.tensor([0, 5, 1]), rows)


class SmallCNN(torch.nn.Module):
    """Four conv-BN-ReLU blocks, an adaptive pooling, a linear layer."""

    def __init__(self):
        super().__init__()
        chans = [3, 8, 16, 16, 24]
        self.blocks = torch.nn.Sequential(*[
            torch.nn.Sequential(torch.nn.Conv2d(a, b, 3, padding=1, stride=1 + (k % 2),
                                                bias=False),
                                torch.nn.BatchNorm2d(b), torch.nn.ReLU())
            for k, (a, b) in enumerate(zip(chans, chans[1:]))])
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(24, 10)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(x)).flatten(1))


MODELS = {
    "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                        torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 10)), (r(7, 32),)),
    "encoder": lambda: (torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=96,
                                                         batch_first=True), (r(2, 16, 64),)),
    "encoder seq-first": lambda: (torch.nn.TransformerEncoderLayer(d_model=64, nhead=4,
                                                                   dim_feedforward=96),
                                  (r(16, 2, 64),)),
    "cnn": lambda: (SmallCNN(), (r(2, 3, 16, 16),)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_compiled_by_name_equal_eager_with_every_operator_in_einloop(name):
    model, inputs = MODELS[name]()
    model.eval()
    if name == "cnn":                       # running statistics that are not 0 and 1
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    got, want = all_in_einloop(model, *inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def all_in_einloop(model, *inputs):
    """*model* compiled with ``backend="einloop"`` and called on *inputs* without gradients,
    no operator left to PyTorch (a BackendWarning is an error): ``(compiled result, eager
    result)``."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="einloop")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        return compiled(*inputs), model(*inputs)


TRAINED = {
    "mlp": MODELS["mlp"],
    "encoder": lambda: (torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=48,
                                                         dropout=0.0), (r(12, 2, 32),)),
    # the table's gradient is a scatter (aten.embedding_dense_backward), repeated ids and the
    # padding row included
    "embedding": lambda: (torch.nn.Sequential(torch.nn.Embedding(11, 8, padding_idx=2),
                                              torch.nn.Linear(8, 3)),
                          (torch.tensor([[1, 9, 2, 1, 10], [0, 2, 9, 9, 4]]),)),
}


def test_one_compiled_model_serves_batches_1_7_and_64(monkeypatch):
    """The second batch size makes dynamo trace with a symbolic batch; the backend compiles
    that graph once with the batch a size variable (tests/torch/test_symbolic_backend.py), so
    no operator is left to PyTorch and no size is compiled on its own (PerSizeGraph unused)."""
    per_size = []
    monkeypatch.setattr(be.PerSizeGraph, "__call__", lambda self, *a: per_size.append(a))
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.GELU(), torch.nn.Linear(24, 5),
                                torch.nn.Softmax(-1)).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="einloop")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        for batch in (1, 7, 64, 7):
            x = r(batch, 12)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert per_size == []


@pytest.mark.parametrize("name", list(TRAINED))
def test_training_gradients_through_the_compiled_model_equal_eager(name):
    """Forward and backward ATen graphs compiled (the encoder's attention backward reads the
    forward's log-sum-exp, which the backend's decomposition computes)."""
    model, (x,) = TRAINED[name]()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="einloop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)    # backward ops partly in PyTorch
        compiled(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


def test_causal_attention_forward_and_backward_equal_eager():
    q, k, v = (r(2, 3, 10, 8).requires_grad_() for _ in range(3))
    torch._dynamo.reset()
    attend = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                           backend="einloop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        got = attend(q, k, v)
        got.square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, t in zip(grads, (q, k, v)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-5)


def _attention_like_eager(fn, *inputs):
    """*fn* compiled with einloop and eager on *inputs*: outputs and the inputs' gradients of
    the squared sum equal."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="einloop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        got = compiled(*inputs)
        got.square().sum().backward()
    grads = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    want = fn(*inputs)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for g, t in zip(grads, inputs):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-5)


def test_a_query_with_every_key_masked_attends_to_nothing_as_in_eager():
    """Its output row is 0 (a softmax over no keys would be NaN), its gradients too."""
    q, k, v = r(1, 2, 3, 4).requires_grad_(), r(1, 2, 2, 4).requires_grad_(), \
        r(1, 2, 2, 4).requires_grad_()
    mask = torch.tensor([[True, True], [False, False], [True, False]])
    _attention_like_eager(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                          q, k, v)
    with torch.no_grad():
        got = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask), backend="einloop")(q, k, v)
    assert torch.all(got[0, :, 1] == 0)


def test_attention_scale_zero_is_a_scale():
    q, k, v = (r(1, 2, 5, 4).requires_grad_() for _ in range(3))
    _attention_like_eager(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.0),
                          q, k, v)


def test_grouped_query_attention_shares_each_key_head_among_its_group():
    q = r(1, 4, 3, 8).requires_grad_()
    k, v = r(1, 2, 5, 8).requires_grad_(), r(1, 2, 5, 8).requires_grad_()
    _attention_like_eager(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                          q, k, v)


def test_grouping_fuses_epilogues_and_reads_through_layout_ops():
    """A linear layer's transposed weight, bias and GELU, and a residual add are one kernel."""
    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b)) + x
    x, w, b = r(6, 8), r(8, 8), r(8)
    compiled, left = lowered(fn, x, w, b)
    parts = [m for m in compiled.modules() if isinstance(m, be.PartitionModule)]
    assert left == [] and len(parts) == 1
    assert len(parts[0].kernels) == 1, [k.name for k in parts[0].kernels]
    torch.testing.assert_close(compiled(x, w, b), fn(x, w, b), rtol=1e-4, atol=1e-4)


def test_a_tuple_results_parts_are_one_kernel_with_several_outputs():
    """Layer norm with its statistics (a training forward saves them): one kernel, three
    outputs."""
    def fn(a, w, b):
        out, mean, rstd = torch.ops.aten.native_layer_norm(a, [7], w, b, 1e-5)
        return out * 2, mean + 1, rstd
    a, w, b = r(3, 5, 7), r(7), r(7)
    compiled, left = lowered(fn, a, w, b)
    (part,) = [m for m in compiled.modules() if isinstance(m, be.PartitionModule)]
    assert left == [] and len(part.kernels) == 1 and len(part.kernels[0].sinks) == 3
    for g, want in zip(compiled(a, w, b), fn(a, w, b)):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)


def test_a_kernel_that_cannot_be_built_runs_in_pytorch_with_a_notice(monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("a lowering bug")
    low = be.LOWERINGS[torch.ops.aten.relu.default]
    monkeypatch.setitem(be.LOWERINGS, torch.ops.aten.relu.default, low._replace(lower=broken))
    x = r(5, 6)
    with pytest.warns(be.BackendWarning, match="a lowering bug"):
        compiled, _ = lowered(lambda a: torch.relu(a) * 2 + 1, x)
    torch.testing.assert_close(compiled(x), torch.relu(x) * 2 + 1)


def test_a_models_kernels_read_the_log_once_while_it_is_unchanged(tmp_path, monkeypatch):
    """Each kernel asks the log for its schedule; the log is read once (a log of thousands of
    records takes a second to read), again only once the file has changed."""
    log = tmp_path / "model.jsonl"
    log.write_text("")
    reads, real = [], be.apply_history_best
    monkeypatch.setattr(be, "apply_history_best", lambda *a, **k: reads.append(a) or real(*a, **k))
    monkeypatch.setattr(be, "_histories", {})
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8),
                                torch.nn.Softmax(-1), torch.nn.Linear(8, 3)).eval()
    x = r(4, 6)
    for expected in (1, 2):
        torch._dynamo.reset()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", be.BackendWarning)
            compiled = torch.compile(model, backend="einloop", options={"log": str(log)})
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert len(reads) == expected
        stat = os.stat(log)
        os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))     # a newer log


def test_bad_options_are_refused_with_what_is_right(tmp_path):
    model = torch.nn.Linear(4, 2)
    not_a_log = tmp_path / "model.py"
    not_a_log.write_text("import torch\n")
    for options, match in (({"lg": "x.jsonl"}, "unknown option.*'lg'.*'log'"),
                           ({"log": str(tmp_path / "none.jsonl")}, "no tuning log there"),
                           ({"log": 123}, "path of a tuning log.*got int 123"),
                           ("x.jsonl", "options is a dict"),
                           ({"log": str(not_a_log)}, "model.py:1: not a JSON record")):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="einloop", options=options)
        with pytest.raises(Exception, match=match) as caught:
            compiled(r(3, 4))
        assert isinstance(caught.value, Error) or isinstance(caught.value.__cause__, Error) \
            or "ArgumentError" in str(caught.value) or "TuningLogError" in str(caught.value)
