"""Child processes of a tuning job die with it.

A job killed with SIGKILL (the OOM killer, ``kill -9``) runs no cleanup, so its build workers and
runner must notice on their own, even when they are busy: stuck in native code, holding the GIL
in a long C call, or stopped (SIGSTOP) while a candidate is timed.  Each child has a *lifeline*:
a pipe of its own whose write end only the job holds, never writes and closes only once the child
has exited (:class:`Line`), so that the child's read end reaches end-of-file exactly when the job
is gone.  The child calls :func:`tie_to_parent` first thing:

* on Linux it asks the kernel to signal it when its read end becomes readable (``O_ASYNC``, with
  ``F_SETSIG`` naming SIGKILL): the end-of-file is then a SIGKILL from the kernel, which needs
  no Python code to run in the child and ends a stopped process too.  A pipe of its own, because
  the owner and the signal belong to the open file, which children sharing one pipe would share;
* it asks for ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` too, when the parent started it from its main
  thread (the signal fires when the *thread* that started the child exits);
* everywhere, a daemon thread blocks reading the read end and ends the child at end-of-file
  (where neither kernel mechanism exists; it needs the GIL).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
F_SETSIG = 10                   # Linux's fcntl command (Python's fcntl module may lack the name)
PARENT_DIED_EXIT = 70           # exit status of a child whose parent died (EX_SOFTWARE)

_write_ends: set = set()        # write ends of this process's live lifelines
_lock = threading.Lock()


def starting_thread_is_long_lived() -> bool:
    """Whether children started now may use PR_SET_PDEATHSIG (see the module docstring)."""
    return threading.current_thread() is threading.main_thread()


class Line:
    """The parent's side of one child's lifeline: pass :attr:`read_end` to the child (then
    :meth:`handed_over`); :meth:`cut` once the child has exited (cutting it earlier kills it)."""

    def __init__(self):
        self.read_end, self._write_end = os.pipe()      # neither inheritable
        with _lock:
            _write_ends.add(self._write_end)

    def handed_over(self):
        """The child holds the read end now: close this process's copy."""
        if self.read_end is not None:
            os.close(self.read_end)
            self.read_end = None

    def cut(self):
        """Close the write end (idempotent)."""
        self.handed_over()
        fd, self._write_end = self._write_end, None
        if fd is not None:
            with _lock:
                _write_ends.discard(fd)
            os.close(fd)


def _forget_after_fork():
    """In a process forked from a job: the job's lifelines are not its own to hold (holding them
    would keep the job's children alive after the job)."""
    global _lock
    _lock = threading.Lock()            # another thread may have held it at the fork
    for fd in list(_write_ends):
        try:
            os.close(fd)
        except OSError:
            pass
    _write_ends.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _set_pdeathsig():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _kill_on_eof(fd) -> bool:
    """Have the kernel SIGKILL this process when *fd* becomes readable; whether it could."""
    if not sys.platform.startswith("linux") or not hasattr(os, "O_ASYNC"):
        return False
    import fcntl
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, F_SETSIG, int(signal.SIGKILL))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except OSError:
        return False
    return True


def _exit_at_eof(fd):
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os._exit(PARENT_DIED_EXIT)


def tie_to_parent(fd: int, pdeathsig: bool, parent_pid: int | None = None):
    """Make this child process end as soon as its parent dies (call it first thing).

    *fd*: the read end of its lifeline; *pdeathsig*: whether to ask for the parent-death signal
    too (see the module docstring); *parent_pid*: the parent's pid, to notice a parent that died
    before the signal was asked for.
    """
    if pdeathsig and sys.platform.startswith("linux"):
        _set_pdeathsig()
        if parent_pid is not None and os.getppid() != parent_pid:
            os._exit(PARENT_DIED_EXIT)
    _kill_on_eof(fd)
    if select.select([fd], [], [], 0)[0]:       # the parent died before that was asked for
        os._exit(PARENT_DIED_EXIT)
    threading.Thread(target=_exit_at_eof, args=(fd,), daemon=True,
                     name="einloop-parent-watch").start()
