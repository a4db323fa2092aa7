"""Tuning an operator with constant inputs (``te.placeholder(..., constant=True)``, a model's
weights): the space packs a constant operand at the root or not at all, the first seed packs it
at the root, and candidates are measured with that pack split off and run once before the timed
calls (einloop/autotune/measure/runner.py), as a deployed model runs it.  The tuned kernel,
split the same way, computes what NumPy computes.  Spaces use explicit targets, so they are
the same on any host."""
import numpy as np
import pytest
import torch

from einloop import autotune, lower, nn, te
from einloop.autotune import MeasureErrorNo
from einloop.autotune.space.sketch.analysis import DagAnalysis, Role
from einloop.autotune.space.sketch.rules import PACK_BLOCK, PACK_NONE, PACK_ROOT
from einloop.autotune.task.auto import AutoTask
from einloop.codegen.build import build_split, constant_positions
from einloop.schedule.passes.split_prologue import split_prologue

import ops

AVX512, AVX2 = "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"


def dense(rows=96, k=64, n=80, constant=True):
    """y = x @ W.T + b (tests/ops.py) as ``[W, b, x, y]``."""
    inputs, outputs, _ = ops.linear_layer(rows, k, n, constant)
    return inputs + outputs


def _pack_knob(task):
    (name,) = [k for k in task.sketch.config_space.knobs if ".pack." in k and k.endswith("W")]
    return task.sketch.config_space.knobs[name]


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_a_constant_operand_is_packed_at_the_root_or_not_at_all(target):
    const = AutoTask.of_tensors(dense(), target)
    plain = AutoTask.of_tensors(dense(constant=False), target)
    assert [e.val for e in _pack_knob(const).entities] == [PACK_NONE, PACK_ROOT]
    assert PACK_BLOCK in [e.val for e in _pack_knob(plain).entities]
    assert const.workload_key != plain.workload_key
    (seed,) = const.seed_configs(1)
    steps = [str(st) for st in seed.steps]
    assert any("'pack', 'W'" in st for st in steps)                     # packed...
    assert not any("compute_at" in st and "W.pack" in st for st in steps)   # ...at the root


def test_tuned_with_the_pack_split_off_and_computing_what_numpy_computes(tmp_path):
    tensors = dense()
    log = tmp_path / "dense.jsonl"
    s, args = autotune.auto_schedule(tensors, n_trial=10, log=str(log), quiet=True, seed=0)
    records = list(autotune.load_log(str(log)))
    # the seeds pack w at the root: those candidates were measured split, and measured right
    packed = [r for r in records if any(st["kind"] == "pack" and st["stage"] == "W"
                                        for st in r.candidate["steps"])]
    # (a loaded machine may time a build out: that is no wrong answer)
    assert len(records) >= 10 and any(r.ok for r in packed)
    assert not [r for r in packed if r.error_no in (MeasureErrorNo.WRONG_ANSWER,
                                                    MeasureErrorNo.RUNTIME_ERROR)]
    split = build_split(s, args)
    rng = np.random.default_rng(0)
    w, b, x = (rng.uniform(-1, 1, [int(d) for d in t.shape]).astype("float32")
               for t in tensors[:3])
    y = np.full((96, 80), np.nan, np.float32)
    if split.prologue is None:
        split.main(w, b, x, y)
    else:
        made = [np.empty(spec.shape, spec.dtype) for spec in split.main.signature.args[4:]]
        split.prologue(*[(w, b, x)[p] for p in split.sources], *made)
        split.main(w, b, x, y, *made)
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-5, atol=1e-5)


def conv_bn_relu(constant):
    """relu(batch_norm(conv2d(x, W))) (einloop.nn) as ``[x, W, mean, var, gamma, beta, y]``,
    the weight and the statistics constant or not, and its PyTorch reference."""
    x = te.placeholder((1, 6, 9, 9), name="x")
    w, m, v, g, b = (te.placeholder(shape, name=n, constant=constant) for n, shape in
                     (("W", (16, 6, 3, 3)), ("mean", (16,)), ("var", (16,)), ("gamma", (16,)),
                      ("beta", (16,))))
    y = nn.relu(nn.batch_norm(nn.conv2d(x, w, padding=1), m, v, g, b))

    def ref(xa, wa, ma, va, ga, ba):
        conv = torch.nn.functional.conv2d(torch.from_numpy(xa), torch.from_numpy(wa), padding=1)
        bn = torch.nn.functional.batch_norm(conv, *map(torch.from_numpy, (ma, va, ga, ba)))
        return torch.relu(bn).numpy()
    return [x, w, m, v, g, b, y], ref


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_batch_norms_scale_of_constant_statistics_is_computed_once_not_per_pixel(target):
    """Of constant statistics, batch norm's per-channel scale and shift stay at the root, where
    the prologue computes them once: no square root is left in the main kernel.  Of inputs that
    may change, they are inlined (a square root per pixel, but no second pass)."""
    for constant in (True, False):
        tensors, _ = conv_bn_relu(constant)
        an = DagAnalysis([tensors[-1]], target)
        roles = {an[op].name: an[op].role for op in an.dag.compute_ops}
        folded = {n for n, r in roles.items() if n.startswith("batch_norm_")}
        assert folded == {"batch_norm_scale", "batch_norm_shift"}
        expect = Role.ROOT if constant else Role.INLINE
        assert {roles[n] for n in folded} == {expect}, roles
        (seed,) = AutoTask.of_tensors(tensors, target).seed_configs(1)
        inlined = {st.stage for st in seed.steps if st.kind.value == "compute_inline"}
        assert not folded & inlined if constant else folded <= inlined


def test_a_folded_batch_norm_computes_what_pytorch_computes():
    tensors, ref = conv_bn_relu(True)
    task = AutoTask.of_tensors(tensors, "llvm")
    for cand in task.seed_configs(3):
        s, args = task.instantiate(cand)
        func = lower(s, args)
        main = split_prologue(func, constant_positions(args)).main
        assert "sqrt" in str(func.body) and "sqrt" not in str(main.body)
        split = build_split(s, args)
        rng = np.random.default_rng(0)
        arrays = [rng.uniform(0.5, 1.5, [int(d) for d in t.shape]).astype("float32")
                  for t in tensors[:-1]]
        y = np.full([int(d) for d in tensors[-1].shape], np.nan, np.float32)
        made = [np.empty(spec.shape, spec.dtype)
                for spec in split.main.signature.args[len(tensors):]]
        split.prologue(*[arrays[p] for p in split.sources], *made)
        split.main(*arrays, y, *made)
        np.testing.assert_allclose(y, ref(*arrays), rtol=1e-5, atol=1e-5)
