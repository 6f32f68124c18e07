"""Handing memory a process has freed back to the operating system.

glibc's malloc keeps freed blocks for the process's next requests rather than returning them:
after a prefill of many positions (tens of MB of activations, freed when it ends) a server's
resident memory would stay that much higher for good. ``release_freed_memory`` returns the
free pages (glibc's ``malloc_trim``); elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
from functools import cache


@cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_freed_memory() -> None:
    """Return the C heap's free pages to the OS (``malloc_trim(0)``, well under a millisecond
    here); a no-op without glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
