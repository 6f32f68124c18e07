"""Handing memory a process has freed back to the operating system.

glibc's malloc keeps freed blocks for the process's next requests rather than returning them:
after a prefill of many positions (tens of MB of activations, freed when it ends) a server's
resident memory would stay that much higher for good. ``release_freed_memory`` returns the
free pages (glibc's ``malloc_trim``); elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import math
import mmap
from functools import cache

import torch
from torch import Tensor

PAGE = mmap.PAGESIZE  # bytes: the unit in which buffers become resident


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


def page_aligned(shape: tuple[int, ...], dtype: torch.dtype,
                 device: torch.device | str) -> Tensor:
    """``torch.empty(shape)`` starting at a page boundary on the CPU (the allocator aligns to
    64 bytes): a slot's head of L positions, a whole number of pages, then fills exactly the
    pages its filled positions need, not one more."""
    n, size = math.prod(shape), torch.empty((), dtype=dtype).element_size()
    flat = torch.empty(n + PAGE // size, dtype=dtype, device=device)
    skip = (-flat.data_ptr() % PAGE) // size if flat.device.type == "cpu" else 0
    return flat[skip:skip + n].view(shape)
