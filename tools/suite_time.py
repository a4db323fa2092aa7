"""Where the test suite's time goes: a pytest plugin that logs each test, and a summary of the logs.

Record (both parts of `make test`, or any pytest run; xdist workers load the plugin too)::

    PYTHONPATH=$PWD/tools SUITE_TIME_DIR=/tmp/st PYTEST_ADDOPTS="-p suite_time" make test

Each pytest process appends one JSON line per test to ``$SUITE_TIME_DIR/<worker>-<pid>.jsonl``:
its wall seconds (setup, call and teardown), the CPU seconds of the test process and of the
children it reaped in that time (fresh interpreters: tuning's workers, the CLI, README snippets),
the seconds spent in LLVM in this process (O3 and MCJIT code generation) with a hash of each
module optimised, and the command lines of the processes it started.

Summarise::

    python tools/suite_time.py /tmp/st [--top 40]

prints, per xdist worker, when its last test ended; the totals; and the modules by wall time
with their CPU, LLVM seconds, process starts and start time.  On a loaded machine wall times
stretch: the CPU seconds compare runs better.  Modules that other modules' kernels duplicate
show in ``compiled twice`` (a module hash optimised by more than one test).
"""
from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import json
import os
import resource
import subprocess
import sys
import time

_out = None
_cur = None
_wrapped = False
_popen_init = subprocess.Popen.__init__


def _file():
    global _out
    if _out is None:
        folder = os.environ.get("SUITE_TIME_DIR", "suite_time")
        os.makedirs(folder, exist_ok=True)
        name = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl"
        _out = open(os.path.join(folder, name), "a", buffering=1)
    return _out


def _counting_popen_init(self, args, *rest, **kw):
    if _cur is not None:
        argv = args if isinstance(args, (list, tuple)) else [args]
        _cur["spawn"].append(" ".join(map(str, argv))[:160])
    return _popen_init(self, args, *rest, **kw)


def _wrap_llvm():
    """Time einloop's O3 and MCJIT steps, once einloop.codegen.jit has been imported (the
    plugin itself imports no einloop: importing it early could change what tests see)."""
    global _wrapped
    jit = sys.modules.get("einloop.codegen.jit")
    if _wrapped or jit is None:
        return
    _wrapped = True
    optimise_for, link = jit._optimise_for, jit.link

    def timed_optimise_for(text, target, loop_vectorize, name, clock):
        t = time.perf_counter()
        try:
            return optimise_for(text, target, loop_vectorize, name, clock)
        finally:
            if _cur is not None:
                dt = time.perf_counter() - t
                _cur["llvm"] += dt
                key = f"{target}|{loop_vectorize}|{text}".encode()
                _cur["modules"].append([hashlib.sha1(key).hexdigest()[:16], round(dt, 4)])

    def timed_link(*args, **kw):
        t = time.perf_counter()
        try:
            return link(*args, **kw)
        finally:
            if _cur is not None:
                _cur["llvm"] += time.perf_counter() - t

    jit._optimise_for, jit.link = timed_optimise_for, timed_link


def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def pytest_configure(config):
    subprocess.Popen.__init__ = _counting_popen_init


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        global _cur
        _wrap_llvm()
        self0, child0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        _cur = {"id": item.nodeid, "t0": time.time(), "llvm": 0.0, "modules": [], "spawn": []}
        t = time.perf_counter()
        yield
        _wrap_llvm()
        _cur["wall"] = time.perf_counter() - t
        _cur["cpu"] = _cpu(resource.RUSAGE_SELF) - self0
        _cur["child_cpu"] = _cpu(resource.RUSAGE_CHILDREN) - child0
        _file().write(json.dumps(_cur) + "\n")
        _cur = None
except ImportError:             # summarising needs no pytest
    pass


def summarise(folder, top=40):
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        worker = os.path.basename(path).split("-")[0]
        with open(path) as f:
            rows += [dict(json.loads(line), worker=worker) for line in f]
    if not rows:
        raise SystemExit(f"no records in {folder}")
    t0 = min(r["t0"] for r in rows)
    per = collections.OrderedDict()
    for r in sorted(rows, key=lambda r: r["t0"]):
        m = per.setdefault(r["id"].split("::")[0], dict(worker=r["worker"], start=r["t0"] - t0,
                           wall=0.0, cpu=0.0, child=0.0, llvm=0.0, spawn=0, n=0))
        m["wall"] += r["wall"]
        m["cpu"] += r["cpu"]
        m["child"] += r["child_cpu"]
        m["llvm"] += r["llvm"]
        m["spawn"] += len(r["spawn"])
        m["n"] += 1
    for worker in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == worker]
        end = max(r["t0"] + r["wall"] for r in mine) - t0
        print(f"{worker}: {len(mine)} tests, last ended at {end:.0f} s, "
              f"{sum(r['wall'] for r in mine):.0f} s in tests")
    seen = collections.defaultdict(list)
    for r in rows:
        for key, dt in r["modules"]:
            seen[key].append(dt)
    twice = sum(sum(dts[1:]) for dts in seen.values())
    print(f"total: {sum(r['wall'] for r in rows):.0f} s wall in tests, "
          f"{sum(r['cpu'] for r in rows):.0f} s CPU in test processes, "
          f"{sum(r['child_cpu'] for r in rows):.0f} s CPU in their children, "
          f"{sum(r['llvm'] for r in rows):.0f} s in LLVM ({sum(map(len, seen.values()))} "
          f"modules, {len(seen)} distinct; compiled twice: {twice:.0f} s), "
          f"{sum(len(r['spawn']) for r in rows)} processes started")
    print(f"{'module':58}{'wall':>7}{'cpu':>7}{'child':>7}{'llvm':>7}{'procs':>6}{'tests':>6}"
          f"{'start':>7} worker")
    for name, m in sorted(per.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        print(f"{name:58}{m['wall']:7.1f}{m['cpu']:7.1f}{m['child']:7.1f}{m['llvm']:7.1f}"
              f"{m['spawn']:6d}{m['n']:6d}{m['start']:7.0f} {m['worker']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="the SUITE_TIME_DIR of a recorded run")
    parser.add_argument("--top", type=int, default=40, help="modules to list (default 40)")
    args = parser.parse_args()
    summarise(args.folder, args.top)
