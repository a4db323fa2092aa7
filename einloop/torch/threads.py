"""einloop's kernels inside a PyTorch process: PyTorch's OpenMP runtime and its thread count.

PyTorch runs its ops on the OpenMP runtime its wheel ships (a ``libgomp.so.1`` beside
``libtorch_cpu``).  Every OpenMP runtime keeps its own pool of worker threads, which spin for a
while after each parallel region; two runtimes in one process would compete for the cores.  So
importing :mod:`einloop.torch` makes einloop's parallel kernels run on the runtime PyTorch's code
is bound to, and with PyTorch's thread count (``torch.get_num_threads()``, which
``torch.set_num_threads`` and ``OMP_NUM_THREADS`` set), unless ``EINLOOP_NUM_THREADS`` is set:
libgomp resizes a calling thread's pool to each region's team, so teams of two sizes in turn
would end and start a thread on every call (PyTorch's default is one thread per physical core,
einloop's one per logical CPU, which differ wherever cores run two threads).

Either import order ends with one runtime:

- PyTorch first (``import einloop.torch`` imports it before any einloop kernel runs): einloop
  loads PyTorch's runtime, whose spin setting (libgomp's default, unless the user set
  ``GOMP_SPINCOUNT``/``OMP_WAIT_POLICY``) stays;
- an einloop kernel first: einloop loaded the system's ``libgomp.so.1`` with its short spin, and
  PyTorch, imported later, binds to that same library (the dynamic linker finds its soname
  loaded already).  One pool still, but with einloop's short spin, which libgomp read when it
  loaded and keeps: PyTorch's own ops and einloop's kernels between them then wake sleeping
  threads where they would have found them spinning, and lose much of their speed (see
  ``benchmarks/bench_torch_threads.py``), so a :class:`~einloop.errors.ThreadPoolWarning` says
  to import einloop.torch (or torch) before the first parallel kernel.  A spin the user set
  (``GOMP_SPINCOUNT``, ``OMP_WAIT_POLICY``) is theirs: no warning then.

If PyTorch's runtime is another file than the one einloop loaded (a build whose libgomp has
another soname), einloop's kernels stay on their own runtime, never half on each, and an
:class:`~einloop.errors.ThreadPoolWarning` says so.
"""
from __future__ import annotations

import warnings

import torch

from ..errors import ThreadPoolWarning
from ..runtime import gomp
from ..runtime.threads import SpinSource, follow_thread_count

_ORDER = "Import einloop.torch (or torch) before the first parallel einloop kernel runs"


def torch_runtime() -> str | None:
    """The file of the OpenMP runtime PyTorch's code calls (None: PyTorch without OpenMP)."""
    return gomp.runtime_of(torch._C.__file__)


def share_torch_runtime() -> None:
    """Run einloop's parallel kernels on PyTorch's OpenMP runtime and with its thread count
    (see the module's docstring); warn if einloop already runs them on another runtime, or
    loaded PyTorch's with einloop's short spin."""
    path = torch_runtime()
    rt = gomp.loaded_runtime()
    if path is not None and not gomp.share_runtime(path):
        mine = rt.path if rt is not None else "no OpenMP runtime (parallel loops run serially)"
        warnings.warn(f"einloop's parallel kernels run on {mine}, loaded before einloop.torch "
                      f"was imported, and PyTorch's ops on another OpenMP runtime, {path}: two "
                      f"thread pools compete for the cores.  {_ORDER}.", ThreadPoolWarning,
                      stacklevel=2)
    elif path is not None and rt is not None and rt.source is SpinSource.EINLOOP_DEFAULT:
        warnings.warn(f"einloop loaded the OpenMP runtime PyTorch shares ({rt.path}) with its "
                      f"short spin ({rt.setting}) before PyTorch was imported: PyTorch's ops "
                      "and einloop's kernels between them now wake sleeping threads and run "
                      f"slower.  {_ORDER}, or set GOMP_SPINCOUNT yourself.", ThreadPoolWarning,
                      stacklevel=2)
    follow_thread_count(torch.get_num_threads)


__all__ = ["share_torch_runtime", "torch_runtime"]
