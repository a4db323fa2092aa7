"""Rule 1: cheap injective stages are inlined; dear or branching ones become location choices."""
import ops
from rule_ops import AVX2, gemm_relu, kinds, check_steps
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.autotune.space.sketch.analysis import DagAnalysis, Role
from einloop.autotune.space.sketch.rules import fires_inline


def test_bias_add_is_inlined_and_relu_output_is_not():
    ins, outs, ref = gemm_relu()
    sp = generate_space(outs, AVX2)
    assert sp.fired["T"] == (RuleKind.INLINE,)
    assert RuleKind.INLINE not in sp.fired["R"]
    steps = sp.steps(sp.config_space.default_index())
    assert [st.stage for st in steps if st.kind.value == "compute_inline"] == ["T"]
    check_steps(steps, ins, outs, ref)


def test_exp_and_branches_are_not_strictly_inlined():
    an = DagAnalysis(ops.elementwise_chain()[1], AVX2)
    assert [f.name for f in fires_inline(an)] == []
    assert an[an.dag.compute_ops[0]].role is Role.FLEXIBLE          # tanh * sigmoid
    ins, outs, ref = ops.conv2d()
    sp = generate_space(outs, AVX2)
    assert sp.fired["Pad"][0] is RuleKind.COMPUTE_LOCATION          # if_then_else: not inlined
    assert "Pad.inline" in sp.config_space.knobs


def test_flexible_stage_inlined_when_its_knob_says_so():
    from rule_ops import steps_of
    ins, outs, ref = ops.conv2d()
    sp = generate_space(outs, AVX2)
    steps = steps_of(sp, Pad__inline=1)
    # the stride-2 conv reads Pad deinterleaved (the residue rule's step comes first)
    assert kinds(steps, "Pad") == ["deinterleave", "compute_inline"]
    check_steps(steps, ins, outs, ref)
