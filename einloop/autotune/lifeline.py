"""Child processes of a tuning job die with it.

A job killed with SIGKILL (the OOM killer, ``kill -9``) runs no cleanup, so its build workers and
runner must notice on their own.  Each child calls :func:`tie_to_parent` first thing:

* on Linux the kernel sends it SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``).  The
  signal fires when the *thread* that started the child exits, so the parent asks for it only
  when it starts children from its main thread, which lives as long as the process;
* everywhere, a daemon thread blocks reading the job's *lifeline pipe* (:func:`lifeline_fd`),
  whose write end only the job holds and never closes: the read returns end-of-file the moment
  the job is gone, and the thread ends the child, even while the child's main thread is stuck in
  native code.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
PARENT_DIED_EXIT = 70           # exit status of a child whose parent died (EX_SOFTWARE)

_pipe = None                    # (read fd, write fd, pid of the process that made them)
_pipe_lock = threading.Lock()


def starting_thread_is_long_lived() -> bool:
    """Whether children started now may use PR_SET_PDEATHSIG (see the module docstring)."""
    return threading.current_thread() is threading.main_thread()


def lifeline_fd() -> int:
    """The read end of this process's lifeline pipe, to pass to a child (made on first use).

    The write end stays open, unused, for the life of the process, so the read end reaches
    end-of-file only when the process has exited.  Both ends are not inheritable: only children
    that are passed the read end explicitly hold it.  A process forked from this one makes its
    own pipe (the inherited one would outlive this process in the fork).
    """
    global _pipe
    with _pipe_lock:
        if _pipe is None or _pipe[2] != os.getpid():
            r, w = os.pipe()
            _pipe = (r, w, os.getpid())
        return _pipe[0]


def _set_pdeathsig():
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


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

    *fd*: the read end of the parent's lifeline pipe; *pdeathsig*: whether to ask the kernel for
    SIGKILL too (see the module docstring); *parent_pid*: the parent's pid, to notice a parent
    that died before the signal was asked for.
    """
    if pdeathsig:
        _set_pdeathsig()
        if parent_pid is not None and os.getppid() != parent_pid:
            os._exit(PARENT_DIED_EXIT)
    # started after prctl, so a parent that died before it is still noticed
    threading.Thread(target=_exit_at_eof, args=(fd,), daemon=True,
                     name="einloop-parent-watch").start()
