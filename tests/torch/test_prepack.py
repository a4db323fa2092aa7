"""A model's weights packed once (einloop/torch/prepack.py): the backend declares a model's
parameters and buffers constant, splits each kernel's root pack of them off into a prologue,
and runs it again only when a weight changes (its version counter, its memory, its object).

The kernels here get a hand schedule that packs every constant weight at the root, so what
is tested does not hang on the auto-scheduler's seeds; every result is compared with eager
PyTorch, after in-place updates, ``load_state_dict`` and optimizer steps too.
"""
import gc
import warnings

import pytest
import torch
import torch.nn.functional as F

from einloop import create_schedule
from einloop.te.tensor import ComputeOp, PlaceholderOp
from einloop.torch import backend as be
from einloop.torch.kernel_run import KernelRun
from einloop.torch.prepack import Prepack

torch.manual_seed(0)


def _root_packed(tensors, log=None):
    """The default schedule of a kernel's *tensors* with its layout stages inlined (a linear
    layer's ``W.T``) and each constant 2-D placeholder that a reduction then reads packed at
    the root (16 rows of its first dimension per block)."""
    outputs = [t for t in tensors if isinstance(t.op, ComputeOp)]
    s = create_schedule(outputs)
    ops = [st.op for st in s.stages]
    inlined = [op for op in ops if isinstance(op, ComputeOp) and not op.reduce_axis
               and all(op is not t.op for t in outputs)]
    for op in inlined:
        s[op].compute_inline()

    def constants_read(op):
        for t in op.input_tensors:
            if isinstance(t.op, PlaceholderOp) and t.op.constant and len(t.shape) == 2:
                yield t
            elif t.op in inlined:
                yield from constants_read(t.op)
    for op in [op for op in ops if isinstance(op, ComputeOp) and op.reduce_axis]:
        for t in set(constants_read(op)):
            packed = s.pack(t, 0, 16, readers=[s[op]])
            s[packed].parallel(s[packed].op.axis[0])
    return [s]


class Made:
    """What the backend made while compiling: Prepacks and partitions."""

    def __init__(self):
        self.prepacks, self.partitions = [], []


def _recording(monkeypatch, cls, into):
    real = cls.__init__

    def record(self, *args, **kwargs):
        real(self, *args, **kwargs)
        into.append(self)
    monkeypatch.setattr(cls, "__init__", record)


@pytest.fixture
def made(monkeypatch):
    monkeypatch.setattr(be, "_schedules", _root_packed)
    made = Made()
    _recording(monkeypatch, Prepack, made.prepacks)
    _recording(monkeypatch, be.PartitionModule, made.partitions)
    torch._dynamo.reset()
    return made


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(40, 72), torch.nn.GELU(),
                               torch.nn.Linear(72, 24)).eval()


def _call(compiled, model, x):
    """*compiled* on *x* equal to *model*, every operator an einloop kernel."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        got = compiled(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_weights_are_packed_once_and_again_when_they_change(made):
    model, x = _mlp(), torch.randn(19, 40)
    compiled = torch.compile(model, backend="einloop")
    for _ in range(3):
        _call(compiled, model, x)
    assert len(made.prepacks) == 2 and [p.runs for p in made.prepacks] == [1, 1]
    with torch.no_grad():
        model[0].weight.mul_(-2)                 # in place: its version counter moves
    _call(compiled, model, torch.randn(19, 40))
    assert [p.runs for p in made.prepacks] == [2, 1]
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    _call(compiled, model, x)
    assert [p.runs for p in made.prepacks] == [3, 2]
    _call(compiled, model, x)
    assert [p.runs for p in made.prepacks] == [3, 2]


def test_two_models_of_one_class_keep_their_own_packed_weights(made):
    # dynamo compiles the class once and passes each instance's parameters to the same graph:
    # each model's weights are packed once, not again on every switch between the two
    first, second, x = _mlp(), _mlp(), torch.randn(19, 40)
    compiled = [torch.compile(m, backend="einloop") for m in (first, second)]
    for _ in range(3):
        for k, m in enumerate((first, second)):
            _call(compiled[k], m, x)
    del m
    assert len(made.prepacks) == 2 and [p.runs for p in made.prepacks] == [2, 2]
    assert [len(p._states) for p in made.prepacks] == [2, 2]
    del compiled[1], second                  # a dead model's packed copies are freed with it
    gc.collect()
    assert [len(p._states) for p in made.prepacks] == [1, 1]
    with torch.no_grad():
        first[0].weight.add_(1)
    _call(compiled[0], first, x)
    assert [p.runs for p in made.prepacks] == [3, 2]


def test_a_model_made_under_inference_mode_is_packed_once(made):
    # its weights are inference tensors, which have no version counter
    with torch.inference_mode():
        model, x = _mlp(), torch.randn(19, 40)
        model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
        compiled = torch.compile(model, backend="einloop")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(made.prepacks) == 2 and [p.runs for p in made.prepacks] == [1, 1]


def test_consecutive_kernels_read_the_packed_weights_in_one_native_call(made):
    model, x = _mlp(), torch.randn(19, 40)
    compiled = torch.compile(model, backend="einloop")
    _call(compiled, model, x)
    runs = [k for p in made.partitions for k in p.kernels if isinstance(k, KernelRun)]
    assert runs and sum(len(r.prepacks) for r in runs) == 2
    # the two weights are read only as their packed copies: passed unchecked
    assert sum(len(r.unread) for r in runs) == 2


def test_training_steps_repack_the_updated_weights(made):
    model = torch.nn.Sequential(torch.nn.Linear(40, 72), torch.nn.ReLU(), torch.nn.Linear(72, 24))
    eager = torch.nn.Sequential(torch.nn.Linear(40, 72), torch.nn.ReLU(), torch.nn.Linear(72, 24))
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="einloop")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    x = torch.randn(19, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        for _ in range(3):
            losses = []
            for m, opt in zip((compiled, eager), opts):
                opt.zero_grad()
                loss = m(x).square().mean()
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-6)
    assert made.prepacks and all(p.runs == 3 for p in made.prepacks)


def test_prepack_false_packs_on_every_call(made):
    model, x = _mlp(), torch.randn(19, 40)
    compiled = torch.compile(model, backend="einloop", options={"prepack": False})
    _call(compiled, model, x)
    with torch.no_grad():
        model[2].weight.data.mul_(3)             # .data: no version counter moves
    _call(compiled, model, x)
    assert made.prepacks == []


def test_a_weight_passed_as_an_input_is_not_constant(made):
    def linear(x, w):
        return F.linear(x, w)
    compiled = torch.compile(linear, backend="einloop")
    x = torch.randn(19, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", be.BackendWarning)
        for _ in range(2):
            w = torch.randn(72, 40)
            torch.testing.assert_close(compiled(x, w), linear(x, w), rtol=1e-4, atol=1e-5)
    assert made.prepacks == []


def test_bad_prepack_option_is_refused():
    torch._dynamo.reset()
    compiled = torch.compile(torch.nn.Linear(4, 2), backend="einloop",
                             options={"prepack": "yes"})
    with pytest.raises(Exception, match="prepack.*give True"):
        compiled(torch.randn(3, 4))
