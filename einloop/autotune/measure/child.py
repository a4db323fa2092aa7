"""Worker processes that start from einloop alone: never from the user's main module.

Build workers and the runner are fresh interpreters started as::

    python -c "<sys.path = the parent's; call child.main()>" ENTRY FD LIFELINE ...

and not with ``multiprocessing``: a ``spawn``-started child first re-imports the parent's
``__main__`` (so that it can unpickle what the parent defined there), which re-runs a script
that tunes at import time (no ``if __name__ == "__main__":``), and fails outright when the main
module has no file to import (a snippet fed on standard input, ``<stdin>``).  A child started
here imports einloop and nothing else of the parent's; what it works on reaches it as data over
its pipe: the task pickled, an operator's DAG pickled whole, a function by its module and name
when that module is importable, and by value (``cloudpickle``) when it lives in ``__main__``
(a script, standard input, a notebook).  So tuning works the same from a script with or without
a main guard, ``python -c``, standard input and a Jupyter kernel.

Wiring of one child (:class:`Child`):

* a Unix socket pair carries pickled messages both ways (``multiprocessing.connection``
  framing); the parent keeps one end, the child gets the other by file descriptor.  The child's
  death reads as end-of-file on the parent's end, and an idle child reads the parent's death
  (or :meth:`Child.close`) as end-of-file on its own;
* its ``sys.path`` is the parent's (the folder of the script, a folder added at run time), set
  before it imports anything, so that it imports einloop and the user's modules from where the
  parent did;
* the child ignores SIGINT (Ctrl-C in a terminal reaches the whole process group; the parent
  decides what to stop), ties its life to the parent's (:mod:`.lifeline`: a lifeline pipe of
  its own, so that a busy child dies with the parent too), optionally lowers its priority
  (``nice``), and then calls ENTRY, an einloop function ``module:function`` that serves
  requests on the connection until it closes.

Standard input of a child is ``/dev/null`` (a snippet fed to ``python -`` is the parent's, not
the child's); standard output and error are the parent's.
"""
from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

from ...errors import TuningError
from . import lifeline

# SIGINT is ignored before anything is imported: Ctrl-C in a terminal reaches the whole process
# group, and the parent decides what to stop
_BOOT = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "sys.path[:] = {path!r}; from einloop.autotune.measure.child import main; "
         "main(sys.argv[1:])")


def _einloop_root() -> str:
    """The folder that holds the einloop package this process runs (this file is
    ``<root>/einloop/autotune/child.py``)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child_path() -> list:
    """The child's sys.path: this process's, with the current folder spelt out (``""`` means
    it), and einloop's folder at the end if it is not on it (so that the child imports this
    einloop; first, it could put site-packages before the standard library)."""
    cwd = os.getcwd()
    path = [os.fsdecode(p) or cwd for p in sys.path if isinstance(p, (str, bytes, os.PathLike))]
    path = list(dict.fromkeys(path))
    root = _einloop_root()
    return path if root in path else path + [root]


class Child:
    """A started child process serving ``entry`` (``"einloop.autotune.measure.builder:serve"``) over
    :attr:`conn`; ``nice``: its added niceness; ``name``: for messages.  :attr:`pdeathsig`:
    whether the kernel kills it when this process dies (see :mod:`.lifeline`)."""

    def __init__(self, entry: str, nice: int = 0, name: str = "worker"):
        if not sys.executable:
            raise TuningError(f"cannot start the {name} process: sys.executable is empty (an "
                              "embedded interpreter); einloop needs a Python executable to run "
                              "its worker processes")
        self.name = name
        line = self._line = lifeline.Line()
        pdeathsig = self.pdeathsig = lifeline.starting_thread_is_long_lived()
        ours, theirs = socket.socketpair()
        try:
            cmd = [sys.executable, "-c", _BOOT.format(path=_child_path()), entry,
                   str(theirs.fileno()), str(line.read_end), str(int(pdeathsig)),
                   str(os.getpid()), str(int(nice))]
            self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(), line.read_end),
                                         stdin=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            ours.close()
            line.cut()
            raise TuningError(f"cannot start the {name} process: {exc}") from None
        finally:
            theirs.close()              # so that the child's death reads as EOF here
        line.handed_over()
        self.conn = Connection(ours.detach())

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exitcode(self):
        """None while it runs; its exit status once it ended (-N: killed by signal N)."""
        return self.proc.poll()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def join(self, timeout=None):
        """Wait up to *timeout* seconds for it to exit (and reap it; its lifeline is then
        cut)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        self._line.cut()

    def kill(self):
        """SIGKILL (the pid is this child's until it is reaped, which only :meth:`join` does)."""
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except (ProcessLookupError, OSError):
                pass

    def close(self):
        """Close the parent's end of the connection (idempotent); the child sees EOF."""
        try:
            self.conn.close()
        except OSError:
            pass

    def stop(self, grace: float):
        """Close the connection, let the child exit for *grace* seconds, kill it, reap it."""
        self.close()
        if grace > 0:
            self.join(grace)
        self.kill()
        self.join(10)


def main(argv):
    """The child's side (see the module docstring); *argv*: ENTRY FD LIFELINE PDEATHSIG PPID
    NICE."""
    entry, fd, life_fd, pdeathsig, ppid, nice = argv
    lifeline.tie_to_parent(int(life_fd), pdeathsig == "1", int(ppid))
    if int(nice) and hasattr(os, "nice"):
        os.nice(int(nice))
    conn = Connection(int(fd))
    module, _, function = entry.partition(":")
    if not module.startswith("einloop."):
        raise SystemExit(f"einloop child process: {entry!r} is not an einloop entry point")
    getattr(importlib.import_module(module), function)(conn)
