"""einloop's parallel kernels in a PyTorch process: which OpenMP runtime they run on, with how
many threads, and that they compute right next to PyTorch's ops.  Which runtime is loaded is
decided once per process, so each case runs in a fresh interpreter.  No timings here: the speed
between PyTorch ops is benchmarks/bench_torch_threads.py's."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from einloop.runtime.threads import SPIN_VARIABLES  # noqa: E402

# Helpers of every script; `alternate(op, kernel, x)` runs a parallel einloop kernel (a custom op
# and one built with einloop.build) in turn with PyTorch's parallel ops, each result checked
# against PyTorch's, and returns the ids of the threads seen meanwhile.  Warnings are errors.
COMMON = """
import os, sys, warnings
warnings.simplefilter("error")
import numpy as np

def einloop_kernel_first():
    from einloop import build, create_schedule, te
    x = te.placeholder((64, 64), "float32", "x")
    y = te.compute((64, 64), lambda i, j: x[i, j] * 2.0, name="y")
    s = create_schedule(y)
    s[y].parallel(s[y].op.axis[0])
    f = build(s, [x, y])
    out = np.empty((64, 64), np.float32)
    f(np.ones((64, 64), np.float32), out)
    assert (out == 2).all()

def gomp_files():
    with open("/proc/self/maps") as f:
        return sorted({os.path.realpath(line.split()[-1]) for line in f
                       if "/" in line and "libgomp" in os.path.basename(line.split()[-1])})

def silu_decl(x):
    from einloop import te
    return te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="y")

def parallel_kernel(shape):
    from einloop import build, create_schedule, te
    x = te.placeholder(shape, "float32", "x")
    y = silu_decl(x)
    s = create_schedule(y)
    s[y].parallel(s[y].op.axis[0])
    k = build(s, [x, y])
    assert k.parallel
    return k

def alternate(op, kernel, x, rounds=20):
    # returns the ids of the threads alive after any of the calls
    import torch
    big = torch.randn(32768 * 4 * (torch.get_num_threads() + 1))   # a team of every thread
    out = torch.empty_like(x)
    seen = set()
    for _ in range(rounds):
        for call in (lambda: torch.exp(big), lambda: torch.testing.assert_close(
                         op(x), torch.nn.functional.silu(x)), lambda: torch.mm(x, x.T),
                     lambda: kernel(x, out)):
            call()
            seen |= set(os.listdir("/proc/self/task"))
        torch.testing.assert_close(out, torch.nn.functional.silu(x))
    return seen
"""


def run(script, env=None):
    """Run COMMON + *script* in a fresh interpreter (no spin variables but *env*); its stdout."""
    clean = {k: v for k, v in os.environ.items()
             if k not in SPIN_VARIABLES and k not in ("EINLOOP_NUM_THREADS", "OMP_NUM_THREADS")}
    clean.update(env or {})
    done = subprocess.run([sys.executable, "-c", COMMON + textwrap.dedent(script)], env=clean,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


ONE_RUNTIME = """
{first}
import torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import einloop.torch as et
from einloop.codegen.parallel import gomp_runtime
from einloop.torch.threads import torch_runtime
x = torch.randn(256, 130)      # points enough for a parallel default schedule
op = et.custom_op("threads_test::silu")(silu_decl)
kernel = parallel_kernel((256, 130))
alternate(op, kernel, x)
assert op.kernel(op.signature((x,))).parallel
rt = gomp_runtime()
print(rt.source.name)
print(rt.path)
print(torch_runtime())
print(*gomp_files(), sep=",")
print(",".join(w.category.__name__ for w in caught) or "-")
print(any("short spin" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize("order", ["torch first", "einloop first"])
def test_einloop_and_torch_share_one_openmp_runtime(order):
    """Kernels run on the library PyTorch's code calls, the only libgomp in the process, and
    compute right between PyTorch's parallel ops, whichever loaded libgomp first."""
    first = "einloop_kernel_first()" if order == "einloop first" else ""
    source, einloop_file, torch_file, mapped, warned, spin = \
        run(ONE_RUNTIME.format(first=first)).split()
    import torch
    torch_dir = os.path.realpath(os.path.dirname(torch.__file__))
    assert einloop_file == torch_file
    assert mapped.split(",") == [torch_file]            # one OpenMP runtime, not two
    if order == "torch first":      # PyTorch's own copy where its wheel ships one
        assert source == "PRELOADED" and warned == "-"
        assert torch_file.startswith(torch_dir) or not any(
            "libgomp" in f for f in os.listdir(os.path.join(torch_dir, "lib")))
    else:       # PyTorch bound to the libgomp einloop loaded, whose short spin it now has
        assert source == "EINLOOP_DEFAULT"
        assert warned == "ThreadPoolWarning" and spin == "True"     # that one warning


def test_a_spin_the_user_chose_is_kept_without_a_warning_in_either_order():
    for first in ("einloop_kernel_first()", ""):
        out = run(ONE_RUNTIME.format(first=first), env={"GOMP_SPINCOUNT": "5000"}).split()
        assert out[0] == "ENVIRONMENT" and out[-2:] == ["-", "False"]


THREADS = """
import torch
import einloop.torch as et
from einloop.runtime import default_num_threads
torch.set_num_threads({torch_threads})
x = torch.randn(8 * ({torch_threads} + 1), 64)
op = et.custom_op("threads_test::silu")(silu_decl)
kernel = parallel_kernel(tuple(x.shape))
before = alternate(op, kernel, x, rounds=2)         # the pool's threads are started
started = alternate(op, kernel, x) - before
print(torch.get_num_threads(), default_num_threads(), kernel.num_threads,
      op.kernel(op.signature((x,))).num_threads, len(started))
"""


@pytest.mark.parametrize("extra", [0, 1])
def test_kernels_take_torchs_thread_count_and_start_no_thread_between_its_ops(extra):
    """With PyTorch's count (even one above the CPUs), einloop's teams are PyTorch's size, so
    the shared pool neither ends nor starts a thread when they alternate."""
    n = len(os.sched_getaffinity(0)) + extra
    counts = run(THREADS.format(torch_threads=n)).split()
    assert counts == [str(n)] * 4 + ["0"]


def test_einloop_num_threads_still_decides():
    counts = run(THREADS.format(torch_threads=1), env={"EINLOOP_NUM_THREADS": "3"}).split()
    assert counts[:4] == ["1", "3", "3", "3"]


ANOTHER_RUNTIME = """
import ctypes
einloop_kernel_first()
import torch
import einloop.torch as et
import einloop.torch.threads as tt
from einloop.codegen.parallel import gomp_runtime
from einloop.errors import ThreadPoolWarning
from einloop.runtime import gomp
mine = gomp_runtime().path
ctypes.CDLL({copy!r}, mode=os.RTLD_GLOBAL)          # a second copy, another file
assert gomp.share_runtime(mine) and not gomp.share_runtime({copy!r})
tt.torch_runtime = lambda: {copy!r}                   # as if PyTorch were bound to the copy
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tt.share_torch_runtime()
assert [w.category for w in caught] == [ThreadPoolWarning], caught
assert {copy!r} in str(caught[0].message) and mine in str(caught[0].message)
# einloop's kernels, JIT-compiled after the copy joined the global scope, stay on einloop's one
import llvmlite.binding as llvm
lib = ctypes.CDLL(mine)
for name in gomp.RUNTIME_SYMBOLS:
    assert llvm.address_of_symbol(name) == ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
x = torch.randn(64, 100)
alternate(et.custom_op("threads_test::silu")(silu_decl), parallel_kernel((64, 100)), x)
assert gomp_runtime().path == mine
print("ok")
"""


def _copy_of_system_libgomp(tmp_path):
    """A copy of the system's libgomp under another name: a second OpenMP runtime file."""
    import ctypes
    try:
        system = ctypes.CDLL("libgomp.so.1")
    except OSError:
        pytest.skip("no system libgomp.so.1")
    from einloop.runtime.gomp import library_file
    copy = tmp_path / "libgomp-copy.so.1"
    shutil.copyfile(library_file(system.GOMP_parallel), copy)
    return copy


def test_a_torch_runtime_other_than_einloops_warns_and_kernels_never_mix_the_two(tmp_path):
    """einloop loaded its libgomp first and PyTorch's code calls another file: einloop says so
    (ThreadPoolWarning) and its kernels keep calling their own runtime's entry points only."""
    copy = _copy_of_system_libgomp(tmp_path)
    assert run(ANOTHER_RUNTIME.format(copy=str(copy)),
               env={"GOMP_SPINCOUNT": "1000"}).split() == ["ok"]


SHARED_BEFORE_LOADING = """
import ctypes
from einloop.runtime import gomp
assert gomp.share_runtime({copy!r})                 # before einloop loads any
from einloop.codegen.parallel import gomp_runtime
einloop_kernel_first()
rt = gomp_runtime()
print(rt.path == os.path.realpath({copy!r}), rt.source.name, {copy!r} in gomp_files())
"""


def test_a_runtime_shared_before_the_first_kernel_is_the_one_kernels_run_on(tmp_path):
    """The generic mechanism under einloop.torch: share_runtime(path) before the first parallel
    kernel makes einloop load that file (here a copy of the system's libgomp), nothing else."""
    copy = _copy_of_system_libgomp(tmp_path)
    assert run(SHARED_BEFORE_LOADING.format(copy=str(copy))).split() == \
        ["True", "EINLOOP_DEFAULT", "True"]
