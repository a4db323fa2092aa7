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


def test_a_strided_convolution_gets_no_residue_split():
    _, outs, _ = ops.conv2d(stride=2)
    sp = generate_space(outs, AVX2)
    assert all(RuleKind.RESIDUE_CLASSES not in rules for rules in sp.fired.values())
    assert all(st.kind.value != "split_residues"
               for st in sp.steps(sp.config_space.default_index()))
