"""Rule 3: an elementwise consumer is tiled with the outer levels, the GEMM computed in its tile."""
from rule_ops import AVX2, check_steps, gemm_relu, kinds, steps_of
from einloop.autotune.space.sketch import RuleKind, generate_space


def test_gemm_bias_relu_fuses_into_the_relu():
    ins, outs, ref = gemm_relu()
    sp = generate_space(outs, AVX2)
    assert RuleKind.FUSE_CONSUMER in sp.fired["C"] and RuleKind.FUSE_CONSUMER in sp.fired["R"]
    for level in (2, 1):
        steps = steps_of(sp, C__cache=level, C__tile__i=(-1, 1, 2, 4))
        assert "cache_write" not in kinds(steps)
        at = [st for st in steps if st.kind.value == "compute_at"]
        assert [(st.stage, st.args["parent"]) for st in at] == [("C", "R")]
        assert "parallel" in kinds(steps, "R") and "parallel" not in kinds(steps, "C")
        check_steps(steps, ins, outs, ref)
    unfused = steps_of(sp, C__cache=0)
    assert "compute_at" not in kinds(unfused)
    check_steps(unfused, ins, outs, ref)


def test_no_fusion_when_the_gemm_is_an_output():
    ins, outs, ref = gemm_relu(output_gemm=True)
    sp = generate_space(outs, AVX2)
    assert RuleKind.FUSE_CONSUMER not in sp.fired["C"]
    steps = sp.steps(sp.config_space.default_index())
    assert "cache_write" in kinds(steps, "C")
    check_steps(steps, ins, outs, ref)
