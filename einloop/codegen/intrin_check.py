"""A user's tensor intrinsic, checked before a kernel calls it: its LLVM IR must parse and
verify, and its instructions must be selectable for the target.

The second check matters because a user declares the features an intrinsic needs: a body that
calls, say, an AVX-512 LLVM intrinsic under ``features=("avx2",)`` passes the feature check,
and LLVM's instruction selection then *aborts the process* ("LLVM ERROR: Cannot select").  So
the intrinsic's function is compiled alone for the target in a child process first, once per
intrinsic and target (cached for the process; about half a second); einloop's own intrinsics
(:mod:`.intrinsics`), whose features are known, skip it.  A failure is a
:class:`~einloop.errors.BuildError` with LLVM's message.
"""
from __future__ import annotations

import subprocess
import sys
import threading

import llvmlite.binding as llvm

from ..errors import BuildError
from .isa import CHILD_COMPILE
from .llvm import init_llvm, llvm_lock

_lock = threading.Lock()
_checked: dict = {}          # (definition, declarations, target) -> None or LLVM's message


def check_intrinsic(s, target, trusted=False):
    """Raise a BuildError unless IntrinsicCall *s*'s LLVM parses, verifies and (unless
    *trusted*) compiles for *target*."""
    key = (s.definition, s.declarations, str(target))
    with _lock:
        known = key in _checked
        problem = _checked.get(key)
    if not known:
        problem = _parse_error(s)
        if problem is None and not trusted:
            problem = _selection_error(s, target)
        with _lock:
            _checked[key] = problem
    if problem is not None:
        name = s.symbol.removeprefix("einloop.tensorize.")
        raise BuildError(f"tensor intrinsic {name} cannot be compiled for target {target}: "
                         f"{problem}. Check its body and declarations, and that its features "
                         "name every CPU feature its instructions need")


def _module_text(s, exported=False):
    definition = s.definition.replace("define internal ", "define ", 1) if exported \
        else s.definition
    return "\n".join(s.declarations) + "\n" + definition


def _parse_error(s):
    init_llvm()
    with llvm_lock:
        try:
            llvm.parse_assembly(_module_text(s)).verify()
        except RuntimeError as e:
            return f"its LLVM IR is invalid ({str(e).strip()})"
    return None


def _selection_error(s, target):
    try:
        run = subprocess.run([sys.executable, "-c", CHILD_COMPILE, target.triple, target.cpu,
                              target.features, "2"], input=_module_text(s, exported=True),
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "compiling it alone took over 2 minutes"
    if run.returncode == 0:
        return None
    lines = [x for x in run.stderr.strip().splitlines() if x.strip()]
    said = next((x for x in lines if "LLVM ERROR" in x), lines[-1] if lines else "no message")
    return f"LLVM fails on it ({said.strip()})"
