"""Child processes of a tuning job die with it.

A job killed with SIGKILL (the OOM killer, ``kill -9``) runs no cleanup, so its build workers and
runner must notice on their own.  Each child calls :func:`tie_to_parent` first thing:

* on Linux the kernel sends it SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``).  The
  signal fires when the *thread* that started the child exits, so the parent asks for it only
  when it starts children from its main thread, which lives as long as the process;
* everywhere, a daemon thread waits on the parent's sentinel (``multiprocessing.parent_process()``:
  a pipe whose write end only the parent holds, or a process handle on Windows) and ends the
  child the moment it is ready, even while the child's main thread is stuck in native code.

Once every child is gone, multiprocessing's resource tracker reads EOF on its pipe (the job and
its children held the only write ends) and exits too.

A script that starts tuning at import time, without ``if __name__ == "__main__":``, is run again
by every spawned child.  :func:`exit_if_bootstrapping` makes such a child exit quietly with
:data:`NO_MAIN_GUARD_EXIT`, so that the parent reports the mistake once (:func:`main_guard_message`)
instead of each child printing multiprocessing's tracebacks.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
PARENT_DIED_EXIT = 70           # exit status of a child whose parent died (EX_SOFTWARE)
NO_MAIN_GUARD_EXIT = 71         # exit status of a child that re-ran a tuning script's top level


def starting_thread_is_long_lived() -> bool:
    """Whether children started now may use PR_SET_PDEATHSIG (see the module docstring)."""
    return threading.current_thread() is threading.main_thread()


def _set_pdeathsig():
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _exit_when_ready(sentinel):
    multiprocessing.connection.wait([sentinel])
    os._exit(PARENT_DIED_EXIT)


def tie_to_parent(pdeathsig: bool):
    """Make this child process end as soon as its parent process dies (call it first thing)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if pdeathsig:
        _set_pdeathsig()
    # started after prctl, so a parent that died before it is still noticed
    threading.Thread(target=_exit_when_ready, args=(parent.sentinel,), daemon=True,
                     name="einloop-parent-watch").start()


def exit_if_bootstrapping():
    """In a spawned child that is importing the main script, exit at once (see docstring)."""
    # set while a spawned child imports the parent's __main__ (multiprocessing's own check,
    # spawn._check_not_importing_main, reads it too); parent_process() is not known yet then
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(NO_MAIN_GUARD_EXIT)


def main_guard_message() -> str:
    script = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    return (f"{script} starts tuning when it is imported: einloop's worker processes are "
            "started with 'spawn' and import the main script again. Put the code that tunes "
            "under  if __name__ == \"__main__\":  (or in a function called from there)")
