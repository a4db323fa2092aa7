"""The schedule as an object: printing, steps, copy and replay, loop kinds, bound inference."""
import json

from einloop import te, create_schedule, lower
from einloop.schedule import Step


def _gemm(n=64):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _tiled(A, B, C):
    s = create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[C].unroll(ki)
    return s


def test_lowered_text_marks_loop_kinds():
    A, B, C = _gemm()
    text = str(lower(_tiled(A, B, C), [A, B, C]))
    assert "parallel for i.outer in range(8):" in text
    assert "vectorized for j.inner in range(16):" in text
    assert "unrolled" not in text          # unrolled loops are expanded by lowering
    assert text.count("A[") == 4           # one read per unrolled iteration of k.inner


def test_steps_replay_gives_the_same_kernel():
    A, B, C = _gemm()
    s = _tiled(A, B, C)
    replayed = create_schedule(C).apply_steps([st.to_json() for st in s.steps])
    assert str(lower(replayed, [A, B, C])) == str(lower(s, [A, B, C]))
    assert str(lower(s.copy(), [A, B, C])) == str(lower(s, [A, B, C]))


def test_steps_are_json_and_replay_on_fresh_tensors():
    A, B, C = _gemm()
    s = _tiled(A, B, C)
    payload = json.dumps([st.to_json() for st in s.steps])
    A2, B2, C2 = _gemm()
    s2 = create_schedule(C2).apply_steps(json.loads(payload))
    assert str(lower(s2, [A2, B2, C2])) == str(lower(s, [A, B, C]))
    assert Step.from_json(s.steps[0].to_json()) == s.steps[0]


def test_schedule_prints_as_code():
    A, B, C = _gemm()
    text = str(_tiled(A, B, C))
    assert text.splitlines()[0] == "s = create_schedule([C])"
    assert "s[C].split(i, factor=8)" in text
    assert "s[C].vectorize(j.inner)" in text


def test_copy_is_independent():
    A, B, C = _gemm()
    s = create_schedule(C)
    s2 = s.copy()
    s2[C].split(s2[C].op.axis[0], factor=4)
    assert not s.steps and len(s2.steps) == 1


def test_compute_at_allocates_only_the_needed_region():
    X = te.placeholder((32, 40), name="X")
    Y = te.compute((32, 40), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = te.compute((32, 38), lambda i, j: Y[i, j] + Y[i, j + 2], name="Z")
    s = create_schedule(Z)
    i, j = s[Z].op.axis
    io, jo, ii, ji = s[Z].tile(i, j, 4, 8)
    s[Y].compute_at(s[Z], jo)
    text = str(lower(s, [X, Z]))
    assert "allocate Y: float32[4 * 10]" in text      # 4 rows, 8 + 2 columns (a stencil halo)


def test_non_dividing_split_is_guarded():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = create_schedule(B)
    o, i = s[B].split(s[B].op.axis[0], factor=4)
    text = str(lower(s, [A, B]))
    assert "for i.outer in range(3):" in text
    assert "if i.outer * 4 + i.inner < 10:" in text


def test_dividing_split_has_no_guard():
    A = te.placeholder((12,), name="A")
    B = te.compute((12,), lambda i: A[i] + 1.0, name="B")
    s = create_schedule(B)
    s[B].split(s[B].op.axis[0], factor=4)
    assert "if" not in str(lower(s, [A, B]))


def test_padding_read_stays_guarded_by_its_condition():
    A = te.placeholder((8,), name="A")
    P = te.compute((10,), lambda i: te.if_then_else(te.all(i >= 1, i < 9), A[i - 1], 0.0), name="P")
    text = str(lower(create_schedule(P), [A, P]))
    assert "select(" in text and "A[i - 1]" in text
