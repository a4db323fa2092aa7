"""The ``einloop`` command line: one-line errors with exit code 2, templates importable from the
current folder, and ``log --code`` output that runs as is and rebuilds the best schedule."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import einloop
from einloop import autotune, lower
from einloop.autotune.log import record
from einloop.autotune.task.code import config_code
from einloop.cli import main

TEMPLATE_MODULE = "cli_code_tmpl"
TEMPLATE_SOURCE = textwrap.dedent('''
    """A two-stage template whose schedules use split, fuse, reorder, compute_at, cache_write
    and annotations on two stages with the same axis names."""
    from einloop import autotune, create_schedule, te


    @autotune.template("cli_code_two_stage")
    def two_stage(n, m):
        cfg = autotune.get_config()
        cfg.define_split("tile_j", m, num_outputs=2, policy="power2", max_factor=8)
        cfg.define_knob("layout", ["at_outer", "fused", "cached"])
        A = te.placeholder((n, m), name="A")
        B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
        k = te.reduce_axis((0, m), name="k")
        C = te.compute((n, m), lambda i, j: te.sum(B[i, k] * A[k % n, j], axis=k), name="C")
        s = create_schedule(C)
        if cfg["layout"].val == "cached":
            CL = s.cache_write(C, "local")
            i, j = s[C].op.axis
            jo, ji = cfg["tile_j"].apply(s, C, j)
            s[CL].compute_at(s[C], jo)
            s[C].vectorize(ji)
            return s, [A, C]
        i, j = s[C].op.axis
        jo, ji = cfg["tile_j"].apply(s, C, j)
        s[C].reorder(i, jo, s[C].op.reduce_axis[0], ji)
        if cfg["layout"].val == "fused":
            f = s[C].fuse(i, jo)
            s[C].parallel(f)
            s[B].compute_at(s[C], f)
        else:
            s[B].compute_at(s[C], jo)
        s[C].vectorize(ji)
        bi, bj = s[B].op.axis
        s[B].unroll(bj)
        return s, [A, C]
''')


@pytest.fixture(scope="module")
def template_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    (folder / f"{TEMPLATE_MODULE}.py").write_text(TEMPLATE_SOURCE)
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))


def _run_code(code):
    """Execute printed code in a fresh namespace; its ``s`` and ``args`` (printing muted)."""
    namespace = {"print": lambda *a, **k: None}
    exec(compile(code, "<einloop log --code>", "exec"), namespace)
    return namespace["s"], namespace["args"]


def test_schedule_code_rebuilds_every_config(template_dir):
    task = autotune.create_task("cli_code_two_stage", (8, 16), module=TEMPLATE_MODULE)
    for index in range(len(task.config_space)):
        config = task.config_space.get(index)
        s, args = _run_code(config_code(task, config))
        expected = lower(*task.instantiate(config))
        assert str(lower(s, args)) == str(expected), f"config {index}"


def test_schedule_code_reads_like_a_schedule(template_dir):
    task = autotune.create_task("cli_code_two_stage", (8, 16), module=TEMPLATE_MODULE)
    fused = task.config_space.get(task.config_space.index_of([2, 1]))     # [-1, 4], "fused"
    assert fused.to_json()["entities"] == {"tile_j": [-1, 4], "layout": "fused"}
    code = config_code(task, fused)
    for line in ["A, C = args", "B = C.op.input_tensors[0]", "i, j = s[C].op.axis",
                 "j_outer, j_inner = s[C].split(j, factor=4)",
                 "i_j_outer_fused = s[C].fuse(i, j_outer)",
                 "s[B].compute_at(s[C], i_j_outer_fused)", "B_i, B_j = s[B].op.axis",
                 "s[B].unroll(B_j)"]:
        assert line in code.splitlines(), line


#: the folder of the einloop under test: the only entry of PYTHONPATH a subprocess gets
EINLOOP_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(einloop.__file__)))


def _env():
    """This environment with only einloop's own folder on PYTHONPATH (never the test's)."""
    return {**os.environ, "PYTHONPATH": EINLOOP_ROOT}


def _cli(args, cwd, env=None):
    """Run the installed ``einloop`` script (its folder, not the current one, is on sys.path)."""
    script = os.path.join(os.path.dirname(sys.executable), "einloop")
    cmd = [script] if os.path.exists(script) else [sys.executable, "-m", "einloop"]
    return subprocess.run(cmd + args, capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=env or _env())


def _run_saved_code(code, folder, check=""):
    """Save printed code (and *check*) as a script in *folder*, a folder of its own, and run
    it there in a fresh interpreter: it must find the modules it imports by itself."""
    folder.mkdir(exist_ok=True)
    (folder / "best.py").write_text(code + "\n" + textwrap.dedent(check))
    run = subprocess.run([sys.executable, "best.py"], capture_output=True, text=True,
                         cwd=folder, timeout=300, env=_env())
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_tune_and_log_code_from_the_templates_folder(template_dir):
    tune = _cli(["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8", "16",
                 "--trials", "6", "--log", "two.jsonl", "--tuner", "grid", "--number", "1",
                 "--repeat", "1", "--quiet"], cwd=template_dir)
    assert tune.returncode == 0, tune.stderr
    show = _cli(["log", "two.jsonl", "--code"], cwd=template_dir)
    assert show.returncode == 0, show.stderr
    s, args = _run_code(show.stdout)            # the whole output runs: the summary is comments
    best = next(iter(autotune.pick_best(record.load(template_dir / "two.jsonl")).values()))
    task = autotune.create_task("cli_code_two_stage", (8, 16), module=TEMPLATE_MODULE)
    expected = lower(*task.instantiate(task.config_space.from_json(best.config)))
    assert str(lower(s, args)) == str(expected)


def test_log_plot_draws_the_tuning_curves(template_dir, tmp_path):
    """``einloop log PATH --plot IMAGE``: a PNG of each workload's best time so far, which
    never rises from one trial to the next."""
    from einloop.autotune.log.curves import best_so_far
    tune = _cli(["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8", "16",
                 "--trials", "5", "--log", "curves.jsonl", "--tuner", "random", "--number", "1",
                 "--repeat", "1", "--quiet"], cwd=template_dir)
    assert tune.returncode == 0, tune.stderr
    image = tmp_path / "curves.png"
    show = _cli(["log", "curves.jsonl", "--plot", str(image)], cwd=template_dir)
    assert show.returncode == 0, show.stderr
    assert "drawn to" in show.stdout and image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (curve,) = best_so_far(template_dir / "curves.jsonl").values()
    assert 1 <= len(curve) <= 5 and all(b <= a for a, b in zip(curve, curve[1:]))


def _one_line_error(run_or_capture, code=2):
    err = run_or_capture.stderr if hasattr(run_or_capture, "stderr") else run_or_capture.err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("einloop: error: "), err
    return lines[0]


def test_log_of_a_missing_file_fails_in_one_line(tmp_path):
    run = _cli(["log", "missing.jsonl"], cwd=tmp_path)
    assert run.returncode == 2
    assert "missing.jsonl does not exist" in _one_line_error(run)


@pytest.mark.parametrize("argv,message", [
    (["log", "{tmp}"], r"is a folder, not a tuning log"),
    (["log", "{tmp}/garbage.jsonl"], r"garbage.jsonl:1: not a JSON record"),
    (["log", "{tmp}/garbage.jsonl", "--code"], r"garbage.jsonl:1: not a JSON record"),
    (["tune", "no_colon"], r"expected MODULE:TEMPLATE"),
    (["tune", "no_such_module_here:t"], r"cannot import 'no_such_module_here'"),
    (["tune", "{tmp}/broken.py:t"], r"importing 'broken' raised SyntaxError"),
    (["tune", "{tmp}/missing.py:t"], r"no such file"),
    (["tune", f"{TEMPLATE_MODULE}:no_such_template"],
     r"cli_code_tmpl\.py defines no 'no_such_template', and no template of that name is "
     r"registered; it defines the functions two_stage and registers the templates "
     r"'cli_code_two_stage'$"),
    (["tune", "{tmp}/cli_ops.py:nonexistent"], r"/cli_ops\.py defines no 'nonexistent', .* it "
     r"defines the functions double, triple$"),
    (["export", "{tmp}/cli_ops.py:SIZE", "--log", "{tmp}/garbage.jsonl", "-o", "{tmp}/x.so"],
     r"/cli_ops\.py defines 'SIZE' \(of type int\), which is not a function, .* it defines "
     r"the functions double, triple$"),
    (["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8"],
     r"template 'cli_code_two_stage' raised TypeError .* missing 1 required positional"),
    (["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8", "16", "--trials", "0"],
     r"n_trial must be a positive integer"),
    (["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8", "16", "--timeout", "-1"],
     r"timeout must be a number of seconds > 0"),
    (["tune", f"{TEMPLATE_MODULE}:cli_code_two_stage", "--args", "8", "16", "--build-timeout",
      "0"], r"build_timeout must be None \(use timeout\) or a number"),
])
def test_every_error_path_is_one_line_and_exit_code_2(template_dir, tmp_path, capsys, argv,
                                                      message):
    (tmp_path / "garbage.jsonl").write_text("this is not json\n")
    (tmp_path / "broken.py").write_text("x = (\n")
    (tmp_path / "cli_ops.py").write_text("SIZE = 3\ndef double(n): pass\n"
                                         "def triple(n): pass\ndef _private(n): pass\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    line = _one_line_error(capsys.readouterr())
    assert re.search(message, line), line


def test_numpy_scalars_name_the_same_workload(template_dir, tmp_path):
    import cli_code_tmpl
    plain = autotune.create_task("cli_code_two_stage", (8, 16))
    numpy = autotune.create_task("cli_code_two_stage", (np.int64(8), np.uint8(16)))
    assert numpy.workload_key == plain.workload_key and numpy.args == (8, 16)
    assert all(type(a) is int for a in numpy.args)
    line = record.encode(numpy, numpy.config_space.get(0),
                         autotune.MeasureResult((1e-3,), autotune.MeasureErrorNo.NO_ERROR, "",
                                                0.1, 0.0))
    assert json.loads(line)["task"]["args"] == [8, 16]
    log = tmp_path / "np.jsonl"
    record.append(log, [line])
    with autotune.apply_history_best(str(log), strict=True) as ctx:
        s, args = cli_code_tmpl.two_stage(np.int16(8), np.int64(16))
    assert ctx.hits == 1 and [t.shape for t in args] == [(8, 16), (8, 16)]
    from einloop.autotune.task.base import make_workload
    assert make_workload("w", (np.float32(0.5), np.bool_(True))).args == (0.5, True)


def test_a_folder_given_as_a_log_is_a_log_error(tmp_path):
    from einloop import TuningLogError
    with pytest.raises(TuningLogError, match=r"cannot read the tuning log .*: Is a directory"):
        autotune.apply_history_best(str(tmp_path))


AUTO_SOURCE = textwrap.dedent('''
    """A tiny operator declared by a function that returns its tensors (no template)."""
    from einloop import te


    def scaled_gemm(M, N, K):
        A = te.placeholder((M, K), name="A")
        B = te.placeholder((K, N), name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        D = te.compute((M, N), lambda i, j: C[i, j] * 0.5, name="D")
        return [A, B, D]
''')


def test_tune_a_function_by_file_path_then_log_and_code(tmp_path):
    """``einloop tune ops/auto_op.py:scaled_gemm`` auto-schedules it; ``einloop log`` lists the
    auto records readably, ``--code`` prints the best as code that declares via the function."""
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "auto_op.py").write_text(AUTO_SOURCE)
    tune = _cli(["tune", "ops/auto_op.py:scaled_gemm", "--args", "8", "16", "8", "--trials", "4",
                 "--log", "auto.jsonl", "--tuner", "random", "--seed", "0", "--number", "1",
                 "--repeat", "1", "--quiet"], cwd=tmp_path)
    assert tune.returncode == 0, tune.stderr
    assert "auto-scheduled from its DAG" in tune.stdout and "best:" in tune.stdout
    records = record.load(tmp_path / "auto.jsonl")
    assert len(records) == 4 and {r.kind.value for r in records} == {"auto"}
    show = _cli(["log", "auto.jsonl"], cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert re.search(r"scaled_gemm\(8, 16, 8\) \[[0-9a-f]{8}\] +\S+ +4 ", show.stdout), show.stdout
    assert "best step list (" in show.stdout
    code = _cli(["log", "auto.jsonl", "--code"], cwd=tmp_path)
    assert code.returncode == 0, code.stderr
    assert "from auto_op import scaled_gemm" in code.stdout
    # saved and run from another folder, the code finds auto_op.py where it was tuned
    said = _run_saved_code(code.stdout, tmp_path / "elsewhere", check="""
        import numpy as np
        from einloop import build
        A, B, D = args
        rng = np.random.default_rng(0)
        a, b = (rng.uniform(-1, 1, t.shape).astype("float32") for t in (A, B))
        out = np.zeros(D.shape, "float32")
        build(s, args)(a, b, out)
        np.testing.assert_allclose(out, a @ b * 0.5, rtol=1e-5, atol=1e-5)
        print("matches NumPy")
    """)
    assert said.rstrip().endswith("matches NumPy") and "for " in said    # and the loop nest


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def test_module_colon_name_is_the_attribute_a_plain_function_is_auto_scheduled(tmp_path):
    """examples/gemm.py registers the template "gemm" (function gemm_template) and defines a
    plain function gemm: ``gemm.py:gemm`` auto-schedules the function, not the template."""
    run = _cli(["tune", os.path.join(EXAMPLES, "gemm.py") + ":gemm", "--args", "16", "16", "16",
                "--trials", "2", "--log", "auto.jsonl", "--tuner", "random", "--number", "1",
                "--repeat", "1", "--quiet"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "auto-scheduled from its DAG" in run.stdout
    records = record.load(tmp_path / "auto.jsonl")
    assert records and {(r.kind.value, r.name) for r in records} == {("auto", "gemm")}


def test_module_colon_template_function_is_its_template_and_its_code_runs(tmp_path):
    """``gemm.py:gemm_template`` is the template it decorates ("gemm"); ``log --code`` of its
    record rebuilds the config even though the module's attribute ``gemm`` is a plain function."""
    run = _cli(["tune", os.path.join(EXAMPLES, "gemm.py") + ":gemm_template", "--args", "16",
                "16", "16", "--trials", "2", "--log", "tmpl.jsonl", "--tuner", "random",
                "--number", "1", "--repeat", "1", "--quiet"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "auto-scheduled" not in run.stdout
    records = record.load(tmp_path / "tmpl.jsonl")
    assert records and {(r.kind.value, r.name) for r in records} == {("template", "gemm")}
    (tmp_path / "other").mkdir()
    code = _cli(["log", str(tmp_path / "tmpl.jsonl"), "--code"], cwd=tmp_path / "other")
    assert code.returncode == 0, code.stderr
    assert any(line.startswith("import gemm   #") for line in code.stdout.splitlines())
    assert "for " in _run_saved_code(code.stdout, tmp_path / "elsewhere")
    sys.path.insert(0, EXAMPLES)
    try:
        s, args = _run_code(code.stdout)
        assert [t.name for t in args] == ["A", "B", "C"]
        # a bare name is a template; with module=, the attribute decides
        assert autotune.create_task("gemm", (16, 16, 16)).kind is autotune.TaskKind.TEMPLATE
        assert autotune.create_task("gemm", (16, 16, 16), module="gemm").kind \
            is autotune.TaskKind.AUTO
        assert autotune.create_task("gemm_template", (16, 16, 16), module="gemm").name == "gemm"
    finally:
        sys.path.remove(EXAMPLES)
        sys.modules.pop("gemm", None)


def test_printed_code_puts_the_folder_of_a_module_on_sys_path_unless_installed(tmp_path):
    from einloop.autotune.task.module_path import module_root
    assert module_root("attention", "/repo/examples/attention.py") == "/repo/examples"
    assert module_root("examples.attention", "/repo/examples/attention.py") == "/repo"
    assert module_root("ops", "/repo/ops/__init__.py") == "/repo"
    assert module_root("einloop.demo", einloop.__file__) == ""      # importable with einloop
    assert module_root("numpy", np.__file__) == ""                  # installed
    assert module_root("ops", "") == ""
