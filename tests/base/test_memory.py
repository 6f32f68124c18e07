"""base.memory: freed C-heap memory goes back to the OS (glibc), where malloc kept it."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from decoderkit.base import memory


def anonymous_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status RssAnon")


def test_freed_heap_blocks_leave_the_resident_memory():
    """40 MB of 64 KB blocks (below malloc's mmap threshold: its heap), touched, then freed
    but for the last (it keeps the heap's top from being trimmed): resident until released."""
    if memory._malloc_trim() is None:
        pytest.skip("not glibc")
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(64 << 10) for _ in range(640)]
    for b in blocks:
        ctypes.memset(b, 1, 64 << 10)
    for b in blocks[:-1]:
        libc.free(b)
    before = anonymous_mb()
    memory.release_freed_memory()
    assert before - anonymous_mb() > 20
    libc.free(blocks[-1])
