"""The process's allocator in its steady state, so that a kernel runs in a fresh process as
fast as in a long-running one.

glibc's malloc serves blocks over its mmap threshold (128 KiB in a fresh process) with a new
mmap each time, page-faulted on first touch and unmapped on free; it raises the threshold to the
size of the first such block that is freed (up to 32 MiB).  Until a process has freed one large
block, every kernel call that allocates a temporary or a local buffer of a few hundred KB pays
for fresh pages, and so do NumPy's operators: a tuned kernel measured in the tuner's runner ran
more than twice as slow in a user's fresh process.  Freeing one 16 MiB block reaches the steady
state every long-running program reaches anyway.  ``mallopt`` would have to pin both the mmap and
the trim threshold (and switch off glibc's own adjustment) and exists only on glibc, whereas this
is harmless with any allocator.
"""
from __future__ import annotations

import numpy as np

WARM_BLOCK_BYTES = 16 << 20
_warmed = False


def warm_allocator():
    """Allocate and free one large block, so that large temporaries come from the heap."""
    global _warmed
    block = np.empty(WARM_BLOCK_BYTES, np.uint8)    # malloc'd and freed: only its size matters
    del block
    _warmed = True


def warm_allocator_once():
    """:func:`warm_allocator`, the first time it is called in this process (every kernel calls
    it when it is made, so the first kernel call of a process already runs warm)."""
    if not _warmed:
        warm_allocator()
