"""The first seed of a strided convolution: its padding computed in the pass of the
residue-class copy that reads it (not in a pass of its own before), and a register tile whose
rows divide the output channels.  The target is explicit (AVX-512: 16 lanes, 32 registers), so
the tile is the same on any host; the seed's results equal the default schedule's."""
import numpy as np

from einloop import build, create_schedule, nn, te
from einloop.autotune.task.auto import AutoTask

TARGET = "llvm -mcpu=skylake-avx512"


def strided_conv(n=2, c=8, k=24, size=18):
    x = te.placeholder((n, c, size, size), name="x")
    w = te.placeholder((k, c, 3, 3), name="w")
    y = nn.conv2d(x, w, stride=2, padding=1, name="conv")
    return [x, w, nn.relu(y, name="relu")]


def _first_seed(tensors):
    task = AutoTask.of_tensors(tensors, TARGET)
    cfg = task.seed_configs(1)[0]
    return task, cfg


def test_the_padding_is_computed_in_the_residue_copy_and_the_rows_divide_the_channels():
    task, cfg = _first_seed(strided_conv())
    values = {name: (e.size if hasattr(e, "size") else e.val)
              for name, e in cfg.entities.items()}
    stages = [f.op.name for f in task.sketch.analysis.stages()]
    assert "conv_pad.deint" in stages              # the stride-2 read goes through the copy
    assert values["conv_pad.inline"] == 1
    assert values.get("conv_pad.deint.inline", 0) == 0
    rows = values["conv.tile.i1"][-1]               # the output channels' register tile
    assert 24 % rows == 0 and rows > 1


def test_the_seed_computes_what_the_default_schedule_computes():
    tensors = strided_conv()
    task, cfg = _first_seed(tensors)
    s, args = task.instantiate(cfg)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 18, 18), dtype=np.float32)
    w = rng.standard_normal((24, 8, 3, 3), dtype=np.float32)
    got, want = np.empty((2, 24, 9, 9), np.float32), np.empty((2, 24, 9, 9), np.float32)
    build(s, args)(x, w, got)                       # the seed's steps, built for this host
    build(create_schedule(tensors[-1].op), tensors)(x, w, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
