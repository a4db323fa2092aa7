"""Where a tuned operator's module lives, so that a log and the code printed from it find the
module again from any folder.

A record stores the module's name and its file.  The folder to put on ``sys.path`` for that
name is the file's folder, one level up per dot of a dotted name (``examples.attention`` in
``/repo/examples/attention.py`` imports from ``/repo``).  Modules that are installed (in
site-packages or the standard library) or part of einloop need no folder.
"""
from __future__ import annotations

import os
import sys
import sysconfig


def module_file(module: str) -> str:
    """The file of the imported module *module* ("" when it is not imported or has none)."""
    return getattr(sys.modules.get(module or ""), "__file__", None) or ""


def module_root(module: str, file: str) -> str:
    """The folder that, on ``sys.path``, imports *module* from *file* ("" when unknown or when
    the module needs no folder: installed, or part of einloop)."""
    if not module or not file or module.split(".")[0] == "einloop":
        return ""
    root = os.path.dirname(os.path.abspath(file))
    depth = module.count(".") + (os.path.basename(file) == "__init__.py")
    for _ in range(depth):
        root = os.path.dirname(root)
    installed = {os.path.abspath(p) for p in sysconfig.get_paths().values()}
    return "" if root in installed else root


def make_importable(module: str, file: str):
    """Append the folder of *module*'s recorded *file* to ``sys.path`` (when it exists and is
    not there yet), so that a process reading a log finds the module tuned from a path."""
    root = module_root(module, file)
    if root and os.path.isdir(root) and root not in sys.path:
        sys.path.append(root)


def import_lines(module: str) -> list:
    """Printed code's lines that let ``import module`` work from any folder: the folder of the
    module this process imported, put first on ``sys.path`` (none for an installed module)."""
    root = module_root(module, module_file(module))
    if not root:
        return []
    return ["import sys", f"sys.path.insert(0, {root!r})   # the folder of {module!r}"]
