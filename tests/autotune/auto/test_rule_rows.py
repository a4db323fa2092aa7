"""Rule 5: long reductions without reuse get rfactor; row stages are computed at the row loop."""
import ops
from rule_ops import check_steps, kinds, steps_of
from einloop.autotune.auto import RuleKind, generate_space


def test_softmax_rfactor_and_one_pass_per_row():
    ins, outs, ref = ops.softmax(9, 64)
    sp = generate_space(outs)
    for name in ("Mx", "S"):
        assert sp.fired[name][:2] == (RuleKind.RFACTOR, RuleKind.COMPUTE_LOCATION)
    assert sp.fired["E"][0] is RuleKind.COMPUTE_LOCATION
    steps = steps_of(sp, Mx__rfactor="vec", S__rfactor="vec", Out__at=0)
    assert [st.stage for st in steps if st.kind.value == "rfactor"] == ["Mx", "S"]
    at = {st.stage: (st.args["parent"], st.args["axis"]) for st in steps
          if st.kind.value == "compute_at"}
    assert set(at) == {"Mx", "Mx.rf", "E", "S", "S.rf"}
    assert set(at.values()) == {("Out", "i")}
    assert "vectorize" in kinds(steps, "Mx.rf") and "parallel" not in kinds(steps, "Mx.rf")
    check_steps(steps, ins, outs, ref)


def test_rows_at_root_and_no_rfactor():
    ins, outs, ref = ops.softmax(9, 64)
    sp = generate_space(outs)
    steps = steps_of(sp, Mx__rfactor="none", S__rfactor="none", Out__at="root")
    assert "rfactor" not in kinds(steps) and "compute_at" not in kinds(steps)
    assert "parallel" in kinds(steps, "Mx")
    check_steps(steps, ins, outs, ref)


def test_layer_norm_and_short_rows():
    ins, outs, ref = ops.layer_norm(7, 40)
    sp = generate_space(outs)
    assert RuleKind.RFACTOR in sp.fired["Sum"] and RuleKind.RFACTOR in sp.fired["Var"]
    for c in range(len(sp.config_space)):
        check_steps(sp.steps(c), ins, outs, ref)
    short = generate_space(ops.softmax(9, 7)[1])           # 7 < two vectors: no rfactor
    assert RuleKind.RFACTOR not in short.fired["Mx"]
