"""Keep freed memory in the process while timing, so a step's time does not depend on
the heap's history.

glibc's malloc hands large freed blocks back to the OS: a block above its mmap threshold
(128 KiB at first, adapting up to 32 MiB) is unmapped when freed, and the top of the
heap is trimmed once more than the trim threshold lies free there. A training step
frees most of what it allocates, so in a process holding one model the next step faults
the same memory in again: BERT-base (110 M parameters, batch 1) took about 10⁵ page
faults and a quarter of its step time doing so, step after step, while a copy of the
same model in a process whose heap had a hole its buffers fit in took none and ran
1.24× faster. Which of the two a step sees depends on what the process allocated and
freed before, not on the step.

So before timing a step, lightspeed tells glibc (`mallopt`, both settings documented in
mallopt(3)) never to trim the heap and never to serve a block with a mapping of its own:
freed memory stays in the process and the next step reuses it, as PyTorch's caching
allocator does for GPU memory and jemalloc and tcmalloc do on the CPU. glibc cannot be
put back to its adaptive thresholds afterwards, so the setting holds for the rest of
the process; the heap then never shrinks below its peak. Elsewhere (no glibc, or a
preloaded allocator that does not read glibc's settings) nothing changes, and the
timer's page-fault count still tells when a step faults memory in.
"""

from __future__ import annotations

import ctypes
import functools
import platform

# mallopt(3) parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
# mallopt(3): "Setting M_TRIM_THRESHOLD to -1 disables trimming completely"; an
# M_MMAP_MAX of 0 "disables the use of mmap(2) for servicing large allocation requests".
_NEVER_TRIM = -1
_NO_MAPPINGS = 0


@functools.cache
def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory in this process from now on (once per
    process); True when it does, False where the C library is not glibc or refused."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error.
    return bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)) and bool(
        mallopt(_M_MMAP_MAX, _NO_MAPPINGS)
    )
