"""The residue-class rule: a reduction whose indices divide a data axis by a constant (a
transposed convolution in its gather form) is computed per residue class before the other
rules plan it, so its quotient axes tile and vectorize like a plain convolution's."""
import random

import ops
from rule_ops import AVX2, check_steps
from einloop import lower
from einloop.autotune.space.sketch import generate_space
from einloop.autotune.space.sketch.rules import RuleKind
from einloop.schedule.replay import replay


def test_every_config_starts_with_the_split_and_the_rule_is_listed():
    _, outs, _ = ops.conv2d_transpose(N=1, C=8, H=6, W=8, K=8)
    sp = generate_space(outs, AVX2)
    assert RuleKind.RESIDUE_CLASSES in sp.fired["Out.res"]
    assert RuleKind.MULTI_LEVEL_TILING in sp.fired["Out.res"]
    rng = random.Random(0)
    for index in [sp.config_space.default_index()] + rng.sample(range(len(sp.config_space)), 5):
        first = sp.steps(index)[0]
        assert (first.kind.value, first.stage, first.args["axes"], first.args["factors"]) \
            == ("split_residues", "Out", ("y", "x"), (2, 2))
    assert sp.default_steps()[0].kind.value != "split_residues"     # the reference is plain


def test_the_best_seed_vectorizes_a_quotient_loop():
    """The issue's 64 -> 32 channel, 28 -> 56 case: the first seed's kernel has a vector loop
    over a quotient axis of the per-class stage (before the rule, none was vectorized)."""
    ins, outs, _ = ops.conv2d_transpose(N=1, C=64, H=28, W=28, K=32)
    sp = generate_space(outs, AVX2)
    seed = sp.seed_configs(1)[0]
    text = str(lower(replay(sp.steps(seed), outs), ins + outs))
    vector_loops = [line.strip() for line in text.splitlines()
                    if line.strip().startswith("vectorized for x.quot")]
    assert vector_loops, text[:3000]


def test_sampled_configs_with_a_consumer_compute_the_transposed_conv():
    ins, outs, ref = ops.conv2d_transpose(N=1, C=3, H=6, W=4, K=4, bias_relu=True)
    sp = generate_space(outs, AVX2)
    assert RuleKind.RESIDUE_CLASSES in sp.fired["Out.res"]
    rng = random.Random(2)
    for index in rng.sample(range(len(sp.config_space)), 12):
        check_steps(sp.steps(index), ins, outs, ref, rtol=1e-4)


def test_a_strided_convolution_reads_its_input_deinterleaved_and_vectorizes():
    """Stride 2 along x: Pad[..., 2 * x + s] is read through Pad.deint[..., s % 2, x + s // 2]
    (no split of the output), so x is a vector loop of the first seed (before: no vector loop,
    a 64 -> 128 channel 56 -> 28 conv ran 4.6x slower than PyTorch's)."""
    ins, outs, ref = ops.conv2d(N=1, C=5, H=11, W=13, K=7, stride=2)
    sp = generate_space(outs, AVX2)
    assert RuleKind.RESIDUE_CLASSES in sp.fired["Pad.deint"]
    rng = random.Random(3)
    for index in [sp.config_space.default_index()] + rng.sample(range(len(sp.config_space)), 8):
        steps = sp.steps(index)
        assert (steps[0].kind.value, steps[0].stage, steps[0].args["stride"]) \
            == ("deinterleave", "Pad", 2)
        assert all(st.kind.value != "split_residues" for st in steps)
        check_steps(steps, ins, outs, ref, rtol=1e-4)
    ins, outs, _ = ops.conv2d(N=1, C=64, H=56, W=56, K=128, stride=2)
    sp = generate_space(outs, AVX2)
    text = str(lower(replay(sp.steps(sp.seed_configs(1)[0]), outs), ins + outs))
    assert any(line.strip().startswith("vectorized for x") for line in text.splitlines())


def test_a_unit_stride_convolution_is_left_alone():
    _, outs, _ = ops.conv2d(stride=1)
    sp = generate_space(outs, AVX2)
    assert all(RuleKind.RESIDUE_CLASSES not in rules for rules in sp.fired.values())
    assert sp.steps(sp.config_space.default_index())[0].kind.value not in (
        "split_residues", "deinterleave")
