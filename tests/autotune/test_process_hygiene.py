"""A tuning job's processes die with it.

Real processes throughout: a real ``einloop tune`` job is killed with SIGKILL (as the OOM killer
would) and its descendants are looked up in /proc.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import measure_templates as mt          # importable by name in the build workers
import tiny_templates
from einloop.autotune.log import record
from einloop.autotune.measure.common import MeasureErrorNo as E, measure_option
from einloop.autotune.measure.local import Measurer
from einloop.autotune.task.create import create_task

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")

HERE = os.path.dirname(tiny_templates.__file__)


def _processes():
    """{pid: (parent pid, state)} of every process, from /proc/*/stat."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(d)] = (int(fields[1]), fields[0])
    return out


def _descendants(root):
    procs, found, todo = _processes(), set(), [root]
    while todo:
        parent = todo.pop()
        kids = {pid for pid, (ppid, _) in procs.items() if ppid == parent} - found
        found |= kids
        todo.extend(kids)
    return found


def _alive(pids):
    """The pids still running (a zombie has exited: only its parent has not reaped it)."""
    procs = _processes()
    return {p for p in pids if p in procs and procs[p][1] != "Z"}


def _tune(log, trials, number, **popen):
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "einloop", "tune", "tiny_templates:tiny_matmul", "--args", "16",
           "32", "8", "--trials", str(trials), "--log", str(log), "--tuner", "grid", "--number",
           str(number), "--repeat", "3", "--quiet"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **popen)


def test_sigkilled_job_leaves_no_process_and_its_log_resumes(tmp_path):
    log = tmp_path / "killed.jsonl"
    job = _tune(log, trials=60, number=50)
    try:
        deadline, family = time.monotonic() + 120, set()
        while time.monotonic() < deadline:
            family |= _descendants(job.pid)      # build workers, runner, resource tracker
            if len(family) >= 3 and log.exists() and record.load(log):
                break
            assert job.poll() is None, job.communicate()
            time.sleep(0.1)
        family |= _descendants(job.pid)
        assert len(family) >= 3 and record.load(log), "the job never got busy"
        job.kill()
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
        job.communicate()
    deadline = time.monotonic() + 5
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(family) == set(), "processes of the killed job live on"

    before = log.read_text().splitlines()
    kept = record.load(log)
    resumed = _tune(log, trials=len(kept) + 4, number=2)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    after = record.load(log)                       # raises if any line is broken
    assert log.read_text().splitlines()[:len(before)] == before
    assert len(after) == len(kept) + 4             # the kept ones were not measured again
    assert len({r.index for r in after}) == len(after)


def test_children_outlive_the_short_lived_thread_that_started_them(task_for_threads):
    """The kernel's parent-death signal follows the starting *thread*: a Measurer created in a
    thread that then ends must keep working."""
    box = {}
    starter = threading.Thread(target=lambda: box.setdefault(
        "m", Measurer(task_for_threads, measure_option(number=1, repeat=1, n_parallel=1))))
    starter.start()
    starter.join()
    m = box["m"]
    try:
        pids = m.child_pids()
        time.sleep(0.5)
        ok = mt.config_index(task_for_threads, tile_i=[-1, 4])
        assert [r.error_no for r in m.measure_batch([ok])] == [E.NO_ERROR]
        assert m.child_pids() == pids and m.restarts == {"runner": 0, "builder": 0}
    finally:
        m.close()


@pytest.fixture
def task_for_threads():
    return create_task("measure_test_gemm", (mt.N,))


def test_busy_children_of_a_killed_job_end_through_the_lifeline_pipe_alone(tmp_path):
    """Children started from a short-lived thread get no parent-death signal from the kernel
    (it would fire when that thread ends), and a busy child reads no end-of-file on its
    connection: the lifeline pipe alone must end a build worker stuck computing (holding the
    GIL) when its job is killed with SIGKILL."""
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent("""
        import threading
        from einloop.autotune.measure.common import measure_option
        from einloop.autotune.measure.local import Measurer
        from einloop.autotune.task.create import create_task
        import measure_templates as mt

        task = create_task("measure_test_build_faults", (16,))
        box = {}
        def start():
            box["m"] = Measurer(task, measure_option(number=1, repeat=1, n_parallel=1,
                                                     build_timeout=600))
        t = threading.Thread(target=start)
        t.start(); t.join()
        pids = box["m"].child_pids()
        print(" ".join(map(str, [pids["runner"], *pids["builders"]])), flush=True)
        box["m"].measure_batch([mt.config_index(task, fault="busy")])    # computes for hours
    """))
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # stderr to a file, and stdout never read to its end: a child that outlived the job would
    # hold those pipes open, and this test would hang instead of failing
    err = open(tmp_path / "stderr.txt", "w")
    job = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=err,
                           text=True, env=env, cwd=tmp_path)
    try:
        line = job.stdout.readline()
        assert line.strip(), (job.wait(timeout=60), (tmp_path / "stderr.txt").read_text())
        runner, builder = (int(p) for p in line.split())
        assert {runner, builder} <= _descendants(job.pid)
        deadline = time.monotonic() + 60
        while _processes().get(builder, (0, "X"))[1] != "R":     # it is computing
            assert time.monotonic() < deadline and job.poll() is None, "the build never ran"
            time.sleep(0.05)
        job.kill()
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(timeout=30)
        job.stdout.close()
        err.close()
    deadline = time.monotonic() + 10
    while _alive({runner, builder}) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = _alive({runner, builder})
    for pid in survivors:               # a failing run leaves nothing behind either
        os.kill(pid, signal.SIGKILL)
    assert survivors == set(), "children of the killed job live on"
