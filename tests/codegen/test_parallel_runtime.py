"""libgomp's spin policy (read once when libgomp loads, so checked in fresh processes) and
parallel kernels called next to NumPy/OpenBLAS in one process."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from einloop import build, create_schedule, te
from einloop.codegen.threads import default_spin_count
from einloop.runtime.threads import SPIN_COUNT_RANGE, SPIN_VARIABLES
from isolated import run_isolated

# Prints einloop's view of the runtime, then libgomp's own (omp_display_env writes to stderr).
REPORT = """
import ctypes, os
from einloop.codegen.parallel import gomp_runtime
rt = gomp_runtime()
print(rt.source.name if rt else "NONE", rt.setting if rt else "", sep="|")
print("GOMP_SPINCOUNT in environment after loading:", os.environ.get("GOMP_SPINCOUNT"))
if rt:
    lib = ctypes.CDLL(rt.library)
    if hasattr(lib, "omp_display_env"):
        lib.omp_display_env(1)
"""


def run_report(env=None, prelude=""):
    """Run REPORT in a fresh interpreter whose environment has no spin variables but *env*."""
    clean = {k: v for k, v in os.environ.items() if k not in SPIN_VARIABLES}
    clean.update(env or {})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + REPORT], env=clean,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    source, setting = done.stdout.splitlines()[0].split("|")
    if source == "NONE":
        pytest.skip("libgomp is not available")
    return source, setting, done.stdout, done.stderr


def libgomp_spin(stderr):
    """The GOMP_SPINCOUNT libgomp says it uses, or skip if this libgomp cannot say."""
    for line in stderr.splitlines():
        if line.strip().startswith("GOMP_SPINCOUNT ="):
            return line.split("=", 1)[1].strip().strip("'")
    pytest.skip("this libgomp has no omp_display_env")


def test_default_spin_count_is_bounded():
    low, high = SPIN_COUNT_RANGE
    assert low <= default_spin_count() <= high


def test_default_spin_is_applied_and_not_left_in_the_environment():
    source, setting, out, err = run_report()
    assert source == "EINLOOP_DEFAULT" and setting.startswith("GOMP_SPINCOUNT=")
    count = setting.split("=")[1]
    assert SPIN_COUNT_RANGE[0] <= int(count) <= SPIN_COUNT_RANGE[1]
    assert libgomp_spin(err) == count
    assert "GOMP_SPINCOUNT in environment after loading: None" in out


@pytest.mark.parametrize("env, spins", [({"GOMP_SPINCOUNT": "12345"}, lambda n: n == 12345),
                                        ({"OMP_WAIT_POLICY": "passive"}, lambda n: n == 0),
                                        ({"OMP_WAIT_POLICY": "active"}, lambda n: n > 300000)])
def test_the_users_spin_setting_is_respected(env, spins):
    source, setting, out, err = run_report(env)
    assert source == "ENVIRONMENT"
    assert setting == ", ".join(f"{k}={v}" for k, v in env.items())
    assert spins(int(libgomp_spin(err)))


def test_a_libgomp_loaded_before_einloop_is_shared_without_a_warning():
    prelude = """
        import ctypes, os, sys, warnings
        warnings.simplefilter("error")
        try:
            ctypes.CDLL("libgomp.so.1", mode=os.RTLD_GLOBAL)
        except OSError:
            print("NONE|")
            sys.exit()
    """
    source, setting, out, err = run_report(prelude=prelude)
    assert source == "PRELOADED" and setting == "libgomp's default"
    assert "Warning" not in err
    assert int(libgomp_spin(err)) > SPIN_COUNT_RANGE[1]     # libgomp's own default stays


ORDERS = {"torch first": ("import torch", ""), "einloop first": ("", "import torch")}
TORCH_AND_EINLOOP = """
import warnings
warnings.simplefilter("error")
{first}
import numpy as np
from einloop import te, create_schedule, build
from einloop.codegen.parallel import gomp_runtime
X = te.placeholder((64, 256), name="X")
Y = te.compute((64, 256), lambda i, j: X[i, j] * 2.0, name="Y")
s = create_schedule(Y)
s[Y].parallel(s[Y].op.axis[0])
f = build(s, [X, Y])
f(np.ones((64, 256), np.float32), np.empty((64, 256), np.float32))   # loads libgomp
{then}
x = torch.rand(64, 256)
y = torch.empty(64, 256)
f(x, y)
torch.testing.assert_close(y, x * 2)
torch.mm(x, x.T)                                  # PyTorch's own parallel region
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line]
print(gomp_runtime().source.name, len(set(maps)))
"""


@pytest.mark.parametrize("order", ORDERS)
def test_einloop_and_torch_share_one_openmp_runtime_silently(order):
    pytest.importorskip("torch")
    first, then = ORDERS[order]
    clean = {k: v for k, v in os.environ.items() if k not in SPIN_VARIABLES}
    done = subprocess.run([sys.executable, "-c", TORCH_AND_EINLOOP.format(first=first, then=then)],
                          env=clean, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    source, libraries = done.stdout.split()
    # torch first: PyTorch's libgomp is reused; einloop first: PyTorch links to einloop's
    assert source == ("PRELOADED" if order == "torch first" else "EINLOOP_DEFAULT")
    assert libraries == "1"                 # one OpenMP runtime in the process, not two


def scale_rows(rows, cols):
    """out[i, j] = x[i, j] * 2 + 1, parallel over rows, vectorized inside."""
    X = te.placeholder((rows, cols), name="X")
    Y = te.compute((rows, cols), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    s = create_schedule(Y)
    i, j = s[Y].op.axis
    s[Y].parallel(i)
    _, ji = s[Y].split(j, factor=8)
    s[Y].vectorize(ji)
    return build(s, [X, Y])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_kernel_alternating_with_numpy_matmul_is_correct(threads):
    f = scale_rows(96, 200)
    f.num_threads = threads
    rng = np.random.default_rng(threads)
    a = rng.standard_normal((96, 64), dtype=np.float32)
    b = rng.standard_normal((64, 200), dtype=np.float32)
    prod, out = np.empty((96, 200), np.float32), np.empty((96, 200), np.float32)
    for _ in range(30):
        np.matmul(a, b, out=prod)
        out[...] = np.nan
        f(prod, out)
        np.testing.assert_allclose(out, (a @ b) * 2 + 1, rtol=1e-5, atol=1e-5)


def test_parallel_kernels_called_from_several_python_threads_are_correct():
    f = scale_rows(64, 130)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((64, 130), dtype=np.float32) for _ in range(3)]
    errors = []

    def work(x):
        out = np.empty_like(x)
        try:
            for _ in range(40):
                f(x, out)
                np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)
                np.matmul(x[:, :64], x[:, :64].T)
        except AssertionError as exc:
            errors.append(exc)
    workers = [threading.Thread(target=work, args=(x,)) for x in inputs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[0]


PLACEMENT = """
import os, subprocess, sys, threading
import numpy as np
from einloop import te, create_schedule, build
X = te.placeholder((64, 300), name="X")
Y = te.compute((64, 300), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
s = create_schedule(Y)
s[Y].parallel(s[Y].op.axis[0])
f = build(s, [X, Y])
f.num_threads = 2
x = np.random.default_rng(0).random((64, 300), dtype=np.float32)
# a process spinning on the second CPU leaves no idle CPU, so Linux wakes the worker on the
# master's: the worker then moves off it for each region, and must get its CPU set back
# (it dies with this process, PR_SET_PDEATHSIG, should the test's timeout kill it first)
spinner = subprocess.Popen([sys.executable, "-c", "import ctypes, itertools, os; "
                            "ctypes.CDLL(None).prctl(1, 9); "
                            "os.sched_setaffinity(0, {{{busy}}}); any(itertools.repeat(0))"])
masks = []
try:
    for cpus in ({cpus}):
        os.sched_setaffinity(0, cpus)          # the master's CPU set (the worker keeps its own)
        for _ in range(300):
            y = np.empty_like(x)
            f(x, y)
            assert np.array_equal(y, x * 2 + 1)
        masks.append(sorted({{tuple(sorted(os.sched_getaffinity(int(t))))
                             for t in os.listdir("/proc/self/task")}}))
finally:
    spinner.kill()
print(masks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread placement is Linux's")
def test_team_threads_moved_off_the_masters_cpu_get_their_cpu_set_back():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to place threads on")
    phases = [set(cpus), {cpus[0]}, set(cpus[:2])]
    code = textwrap.dedent(PLACEMENT.format(cpus=repr(phases), busy=cpus[1]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    # after the calls every thread has a set it was given (the process's, or the master's of
    # that phase), never one narrowed to leave the master's CPU; the kernel computed right
    # each time, also with the master on one CPU, which the worker may leave or share
    for masks, phase in zip(eval(done.stdout), phases):
        assert set(masks) <= {tuple(cpus), tuple(sorted(phase))}, (masks, phase)


def test_team_placement_is_emitted_for_linux_only():
    from einloop.codegen import compile_func      # noqa: F401  (the JIT is loaded anyway)
    X = te.placeholder((64, 64), name="X")
    Y = te.compute((64, 64), lambda i, j: X[i, j] + 1.0, name="Y")
    s = create_schedule(Y)
    s[Y].parallel(s[Y].op.axis[0])
    linux = build(s, [X, Y]).get_source("llvm-unopt") if sys.platform.startswith("linux") \
        else build(s, [X, Y], target="llvm -mtriple=x86_64-linux-gnu").get_source("llvm-unopt")
    mac = build(s, [X, Y], target="llvm -mtriple=arm64-apple-macosx").get_source("llvm-unopt")
    assert "sched_getcpu" in linux and "sched_setaffinity" in linux
    assert "sched_" not in mac                      # macOS has neither call


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_forked_child_runs_parallel_kernels_serially_instead_of_waiting_forever():
    # libgomp's pool does not survive fork: a team started in the child would wait for the
    # parent's threads forever; the child runs the kernel (explicit num_threads too) on one
    code = """
        import os, numpy as np
        from einloop import build, create_schedule, te
        A = te.placeholder((4096, 64), name="A")
        B = te.compute((4096, 64), lambda i, j: A[i, j] * 2.0, name="B")
        s = create_schedule(B)
        s[B].parallel(B.op.axis[0])
        f = build(s, [A, B])
        x = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
        y = np.empty_like(x)
        f(x, y)                                  # the parent's pool has threads now
        g = build(s, [A, B], name="pinned")
        g.num_threads = 2
        pid = os.fork()
        if pid == 0:
            y[:] = 0
            f(x, y)
            z = np.zeros_like(x)
            g(x, z)
            ok = (y == 2 * x).all() and (z == 2 * x).all() and f.num_threads == 1
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        y[:] = 0
        f(x, y)                                  # the parent keeps its pool
        print(os.waitstatus_to_exitcode(status), bool((y == 2 * x).all()), g.num_threads)
    """
    assert run_isolated(code).split() == ["0", "True", "2"]
