"""Prefix reuse: the keys and values of prompts' first positions, kept so that a row whose
prompt begins alike starts from them and prefills only the rest (llama.cpp's ``cache_prompt``,
vLLM's automatic prefix caching).

A ``Prefix`` is what a row starts from (``Row.prefix``, loaded by ``Rows`` through
``KVCache.load_prefix``); a ``PrefixStore`` keeps them for ``Rows`` (``lm chat``'s turns, the
server's requests) in blocks of ``PREFIX_BLOCK`` positions, vLLM's way: a block is keyed by
its adapter, the block before it and its own ids, so prompts sharing a system prompt hold its
blocks once, and a lookup walks a prompt's blocks from the first while they are held. Bounded
in bytes, least recently used first out; a block is never evicted before the blocks after it
(a hit touches a path from its end back to its first block). Chosen over llama.cpp's longest
common prefix per slot: 16 clients sharing a 1,000-token system prompt would hold it 16
times there (46 MB each on the SmolLM2-135M shape), once here.

Reuse is exact: a rowwise prefill attends in chunks ending at multiples of
``nn.attend.PREFILL_CHUNK`` (``prefill_chunks``), the block size here, so position i is
computed by a call of the same shape whether its prompt was prefilled whole or after a
stored prefix of whole blocks; the linears are row-invariant (``rowwise``, int8). Only whole
blocks are stored, and a row always prefills its prompt's last token (its logits give the
first token): ``reusable``. Keys differ between adapters, so a block's key names its adapter.
A step's keys and values (a reply's tokens) round differently from a prefill's and are never
stored. Legend: N layers, h key/value heads, n positions, d_k head width.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from decoderkit.base.checks import DEFAULT_PREFIX_CACHE_MB, PREFIX_CACHE_MB
from decoderkit.base.errors import UsageError
from decoderkit.nn.attend import PREFILL_CHUNK

PREFIX_BLOCK = PREFILL_CHUNK  # positions a stored block holds
__all__ = ["DEFAULT_PREFIX_CACHE_MB", "PREFIX_BLOCK", "Prefix", "PrefixStore",
           "check_prefix_cache_mb", "reusable"]
def check_prefix_cache_mb(value: int) -> int:
    """The prefix store's budget in MiB (``--prefix-cache-mb``): ``base.checks.PREFIX_CACHE_MB``'s
    range, the CLI's flag type too; off is None (``--no-prefix-reuse``), never 0."""
    PREFIX_CACHE_MB.check("prefix_cache_mb (--prefix-cache-mb)", value)
    return value


def reusable(stored: int, prompt: int) -> int:
    """Of ``stored`` positions matching a prompt of ``prompt`` ids, those a row starts from:
    whole blocks, never the prompt's last id (prefilled for its logits)."""
    return max(0, min(stored, prompt - 1)) // PREFIX_BLOCK * PREFIX_BLOCK


@dataclass(frozen=True)
class Prefix:
    """Keys and values of a prompt's first ``length`` positions: (N, h, >= length, d_k)."""

    length: int
    keys: Tensor
    values: Tensor


@dataclass
class _Block:
    id: int  # names it in its successors' keys
    keys: Tensor  # (N, h, PREFIX_BLOCK, d_k)
    values: Tensor


Reader = Callable[[int, int], tuple[Tensor, Tensor]]  # (start, stop) -> keys, values


class PrefixStore:
    """Blocks of prompts' keys and values, at most ``budget`` bytes, looked up by
    (adapter, ids); counts ``hits`` (rows started from a prefix) and ``reused`` (positions
    not prefilled thanks to it)."""

    def __init__(self, budget: int):
        if budget < 1:
            raise UsageError(f"a prefix store's budget must be at least 1 byte, got {budget}")
        self.budget, self.bytes = budget, 0
        self.hits = self.reused = 0
        self._blocks: OrderedDict[tuple, _Block] = OrderedDict()  # oldest first
        self._ids = 0

    def _path(self, adapter: str | None, ids: list[int]) -> list[tuple]:
        """The keys of ``ids``' whole blocks held, from the first, while held."""
        keys, parent = [], -1
        for start in range(0, len(ids) - PREFIX_BLOCK + 1, PREFIX_BLOCK):
            key = (adapter, parent, tuple(ids[start:start + PREFIX_BLOCK]))
            block = self._blocks.get(key)
            if block is None:
                break
            keys.append(key)
            parent = block.id
        return keys

    def _touch(self, keys: list[tuple]) -> None:
        for key in reversed(keys):  # the first block the most recent: evicted last
            self._blocks.move_to_end(key)

    def longest(self, adapter: str | None, ids: list[int]) -> Prefix | None:
        """The longest stored prefix of ``ids`` a row may start from (``reusable``), counted
        as a hit; None when there is none."""
        keys = self._path(adapter, ids)[:reusable(len(ids), len(ids)) // PREFIX_BLOCK]
        if not keys:
            return None
        self._touch(keys)
        blocks = [self._blocks[k] for k in keys]
        self.hits += 1
        self.reused += len(keys) * PREFIX_BLOCK
        return Prefix(len(keys) * PREFIX_BLOCK, torch.cat([b.keys for b in blocks], dim=2),
                      torch.cat([b.values for b in blocks], dim=2))

    def add(self, adapter: str | None, ids: list[int], read: Reader) -> None:
        """Store the whole blocks of prompt ``ids`` not held yet; ``read(start, stop)`` gives
        the keys and values (N, h, stop - start, d_k) of its positions start..stop-1."""
        keys = self._path(adapter, ids)
        parent = self._blocks[keys[-1]].id if keys else -1
        for start in range(len(keys) * PREFIX_BLOCK, len(ids) - PREFIX_BLOCK + 1,
                           PREFIX_BLOCK):
            k, v = read(start, start + PREFIX_BLOCK)
            size = k.nbytes + v.nbytes
            if size > self.budget:
                break
            self._ids += 1
            key = (adapter, parent, tuple(ids[start:start + PREFIX_BLOCK]))
            self._blocks[key], parent = _Block(self._ids, k, v), self._ids
            self.bytes += size
            keys.append(key)
        self._touch(keys)
        while self.bytes > self.budget:  # the least recently used out (this prompt's last)
            _, block = self._blocks.popitem(last=False)
            self.bytes -= block.keys.nbytes + block.values.nbytes
