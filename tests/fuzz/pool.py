"""Persistent worker processes that run cases, with time-outs and crash detection.

A worker (``python -m <package>.worker``) reads one JSON case a line on stdin and answers on
stdout with ``{"phase": ...}`` lines as it goes and a final ``{"result": ...}``.  The parent
gives each phase its own time limit (compiling gets ``compile_timeout``, running a kernel
``run_timeout``), so a hang is caught where it happens; a worker that dies (SIGSEGV, abort) or
hangs is recorded as ``crash`` or ``hang`` and replaced, and the run goes on.  One process runs
many cases, which is much cheaper than a process per case; it is restarted every
``recycle`` cases to bound the memory its JIT engines hold.
"""
from __future__ import annotations

from dataclasses import dataclass
import json
import os
import pathlib
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

STDERR_TAIL = 3000


@dataclass(frozen=True)
class Limits:
    compile_timeout: float = 60.0
    run_timeout: float = 20.0
    other_timeout: float = 60.0

    def of(self, phase):
        if phase.startswith("build"):
            return self.compile_timeout
        if phase.startswith("run"):
            return self.run_timeout
        return self.other_timeout


def _package_root():
    """The folder from which this package imports under its current name."""
    depth = len(__package__.split("."))
    return str(pathlib.Path(__file__).resolve().parents[depth])


class Worker:
    """One worker process, started on demand and restarted after a crash, hang or recycle."""

    def __init__(self, limits=Limits(), recycle=150, command=None):
        self.limits, self.recycle = limits, recycle
        self.command = command or [sys.executable, "-m", f"{__package__}.worker"]
        self.proc = None
        self.done = 0
        self._buf = b""

    def start(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [_package_root()] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env)
        self.done, self._buf = 0, b""

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout, self.stderr):
                f.close()
            self.proc = None

    def run(self, case):
        """The outcome record of *case*, whatever happens to the process."""
        if self.proc is None or self.done >= self.recycle:
            self.close()
            self.start()
        self.done += 1
        self.stderr.seek(0, os.SEEK_END)
        err_start = self.stderr.tell()
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        phase = "start"
        deadline = time.monotonic() + self.limits.of(phase)
        while True:
            msg = self._message(deadline)
            if msg is None:                    # time-out
                self.close()
                return _record("hang", phase, "timeout",
                               f"no progress for {self.limits.of(phase):g} s in phase {phase}", t0)
            if msg == "eof":
                rc = self.proc.wait()
                tail = self._stderr_tail(err_start)
                self.close()
                kind = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
                return _record("crash", phase, kind, tail, t0)
            if "phase" in msg:
                phase = msg["phase"]
                deadline = time.monotonic() + self.limits.of(phase)
            else:
                return msg["result"]

    def _message(self, deadline):
        """The next JSON message, "eof" if the worker died, or None at the deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return "eof"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _stderr_tail(self, start):
        self.stderr.seek(start)
        return self.stderr.read().decode(errors="replace")[-STDERR_TAIL:]


def _record(status, phase, etype, msg, t0):
    return {"status": status, "phase": phase, "etype": etype, "msg": msg, "tolerated": [],
            "seconds": time.perf_counter() - t0}


class Pool:
    """``jobs`` workers fed from one queue; ``imap`` yields (case, outcome) as they finish."""

    def __init__(self, jobs=2, limits=Limits()):
        self.workers = [Worker(limits) for _ in range(jobs)]

    def imap(self, cases):
        todo, done = queue.Queue(), queue.Queue()
        n = 0
        for case in cases:
            todo.put(case)
            n += 1

        def serve(worker):
            while True:
                try:
                    case = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    outcome = worker.run(case)
                except Exception as e:     # noqa: BLE001  (a fault of ours must not stall the run)
                    worker.close()
                    outcome = _record("harness", "pool", type(e).__name__, str(e), time.perf_counter())
                done.put((case, outcome))

        threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        for _ in range(n):
            yield done.get()
        for t in threads:
            t.join()

    def run(self, case):
        """Run one case on the first worker (the shrinker's entry point)."""
        return self.workers[0].run(case)

    def close(self):
        for w in self.workers:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
