"""A replica's paged KV cache (``paged``, ``chunked``): blocks of ``block`` tokens taken at admission and as
sequences grow, and automatic prefix caching, which keeps blocks by a hash of everything before them and in them
and finds them again for a later prompt that starts the same (vLLM's automatic prefix caching, SGLang's radix
cache).

A request's content is a list of segments, ``(content id, tokens)``: a system prompt, a turn of a conversation, a
trace's 512-token block.  Two segments with the same id hold the same tokens (up to the shorter's length); tokens
past the last segment are the request's own.  A block is keyed, as vLLM keys it, by a hash chained over full
blocks: block k's key hashes block k-1's key with the pieces of segments block k holds, so a key names a whole
prefix and a prompt matches the cache block by block from its start.  Only full blocks are keyed.

The cache holds keyed blocks with how many running sequences hold each.  A block none holds stays cached,
evictable, in least-recently-used order (a sequence's blocks are released last block first, so its prefix's first
blocks are evicted last, as vLLM frees them); an allocation takes never-cached free blocks first and evicts the
least recently used cached block only when none is left (SGLang's rule; vLLM's one free queue may evict a cached
block while an uncached one waits further back).  A block several sequences hold is one block of memory, counted
once in the blocks and KV tokens in use.

The engine's sequences (``roofline.serving.simulate.Seq``) are read and updated here: their request, prefill
target and what is left of it, KV tokens, blocks, and their keys, held cached blocks and first hit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

KV_WATERMARK = 0.01  # vLLM keeps 1% of the blocks free at admission, so running sequences can grow
# How many block keys a replica remembers of the segments it chained (each with the chain's state before it), least
# recently used forgotten first: a system prompt, or a conversation's earlier turns, is hashed once and not once
# per request (10,000 prompts opening with 2,000 shared tokens took 1.5 s to key one by one), in a few MB.
REMEMBERED_KEYS = 1 << 18


# The chain's state between segments: its last key, the tokens of the block being filled and that block's pieces.
Chain = tuple[int, int, tuple[int, ...]]
START: Chain = (0, 0, ())


def chain_segment(state: Chain, content: int, length: int, block: int) -> tuple[tuple[int, ...], Chain]:
    """The keys of the blocks that ``length`` tokens of ``content`` fill after the chain's ``state``, and its state
    after them."""
    key, filled, pieces = state
    keys, start, parts = [], 0, list(pieces)
    while start < length:
        take = min(length - start, block - filled)
        start += take
        filled += take
        parts += (content, start)  # a piece ends here in its segment: with the chain before it, its tokens
        if filled == block:
            key = hash((key, *parts))
            keys.append(key)
            filled, parts = 0, []
    return tuple(keys), (key, filled, tuple(parts))


def block_keys(segments: Sequence[tuple[int, int]], block: int) -> list[int]:
    """The chained keys of the full blocks of ``block`` tokens that ``segments`` cover (a block holding any token
    past the segments has none)."""
    keys: list[int] = []
    state = START
    for content, length in segments:
        more, state = chain_segment(state, content, length, block)
        keys += more
    return keys


class PrefixCache:
    """Keyed KV blocks: how many running sequences hold each, and those none holds in LRU order."""

    __slots__ = ("holders", "idle", "shared_blocks")

    def __init__(self) -> None:
        self.holders: dict[int, int] = {}  # key -> running sequences holding the block (0: cached, evictable)
        self.idle: OrderedDict[int, None] = OrderedDict()  # held by none, least recently used first
        self.shared_blocks = 0  # references beyond each block's first: blocks the sequences count twice

    def match(self, keys: Sequence[int], most: int) -> int:
        """How many of the first ``most`` keys are cached, counted from the first until one is not."""
        holders, hits = self.holders, 0
        for key in keys[:most]:
            if key not in holders:
                break
            hits += 1
        return hits

    def idle_among(self, keys: Sequence[int]) -> int:
        """Of these cached keys, how many no sequence holds: taking them takes them out of the evictable pool."""
        return list(map(self.holders.__getitem__, keys)).count(0)

    def acquire(self, keys: Sequence[int]) -> None:
        """A sequence takes these cached blocks (its prefix found in the cache)."""
        holders, idle, shared = self.holders, self.idle, 0
        for key in keys:
            count = holders[key]
            if count:
                shared += 1
            else:
                del idle[key]
            holders[key] = count + 1
        self.shared_blocks += shared

    def add(self, key: int) -> bool:
        """A sequence's newly computed full block becomes cached, held by it; False when the key is cached
        already (another sequence computed the same block meanwhile: this copy stays the sequence's own)."""
        if key in self.holders:
            return False
        self.holders[key] = 1
        return True

    def release(self, keys: Sequence[int]) -> None:
        """A sequence lets go of its cached blocks (finished or preempted), last block first: the ones no
        sequence holds any more become evictable, most recently used last."""
        holders, idle, shared = self.holders, self.idle, 0
        for key in reversed(keys):
            count = holders[key] - 1
            holders[key] = count
            if count:
                shared += 1
            else:
                idle[key] = None
        self.shared_blocks -= shared

    def evict(self) -> None:
        """Forget the least recently used block no sequence holds (its memory is taken for a new block)."""
        key, _ = self.idle.popitem(last=False)
        del self.holders[key]


class KvBlocks:
    """``total`` blocks of ``block`` tokens: the free ones, and with ``prefix_cache`` the keyed ones."""

    __slots__ = ("total", "block", "free", "watermark", "cache", "chained", "chained_keys", "reserve_full", "fixed")

    def __init__(self, total: int, block: int, prefix_cache: bool, reserve_full: bool = False, fixed: int = 0
                 ) -> None:
        self.total, self.block, self.free = total, block, total
        # Blocks' worth of memory each running sequence holds whatever its length (a hybrid model's recurrent states
        # and sliding windows, in the same memory as the KV blocks: vLLM's hybrid allocator), taken at admission.
        self.fixed = fixed
        # Reserving every block a request can need leaves nothing to grow into: no watermark is kept for growth.
        self.reserve_full = reserve_full
        self.watermark = 0 if reserve_full else int(KV_WATERMARK * total)
        self.cache = PrefixCache() if prefix_cache else None
        self.chained: OrderedDict[tuple[Chain, int, int], tuple[tuple[int, ...], Chain]] = OrderedDict()
        self.chained_keys = 0

    def keys_of(self, segments: Sequence[tuple[int, int]]) -> list[int]:
        """``block_keys`` of these segments, each segment chained once after a given state and remembered."""
        keys: list[int] = []
        state, chained = START, self.chained
        for content, length in segments:
            step = (state, content, length)
            found = chained.get(step)
            if found is None:
                found = chained[step] = chain_segment(state, content, length, self.block)
                self.chained_keys += len(found[0])
                while self.chained_keys > REMEMBERED_KEYS and len(chained) > 1:
                    _, (forgotten, _) = chained.popitem(last=False)
                    self.chained_keys -= len(forgotten)
            else:
                chained.move_to_end(step)
            more, state = found
            keys += more
        return keys

    def spare(self) -> bool:
        """A block can be had: a free one, or a cached one no sequence holds."""
        return bool(self.free or (self.cache and self.cache.idle))

    def cached_prefix(self, seq: Any) -> int:
        """How many of the first blocks of the sequence's prompt the cache holds (nothing is taken).  As in vLLM,
        at least the prompt's last token is computed (its logits give the next token): a cached block holding it
        is not used."""
        request = seq.request
        if self.cache is None or not request.segments:
            return 0
        if seq.keys is None:  # its prompt (and output) as far as they are known content, once
            seq.keys = self.keys_of(request.segments)
        return self.cache.match(seq.keys, (seq.prefill_target - 1) // self.block)

    def reserve(self, seq: Any, hits: int, running: bool) -> bool:
        """Give the sequence its prompt's blocks (with ``reserve_full``, its prompt's and whole output's: it never
        needs another), the first ``hits`` from the cache and the rest new, unless that would leave fewer free than
        the watermark while sequences run (an idle engine admits whatever fits)."""
        tokens = seq.prefill_target + (seq.output_tokens - seq.generated if self.reserve_full else 0)
        need, cache = -(-tokens // self.block), self.cache
        spare = self.free
        if cache is not None:
            spare += len(cache.idle) - (cache.idle_among(seq.keys[:hits]) if hits else 0)
        if spare - (need - hits) - self.fixed < (self.watermark if running else 0):
            return False
        if cache is not None and seq.keys is not None:
            seq.held = seq.keys[:hits]
            cache.acquire(seq.held)
            seq.kept = hits
        self.take(need - hits + self.fixed)
        seq.blocks = need
        if hits:  # its cached prefix is in the KV already: prefill starts after it
            seq.kv_tokens = hits * self.block
            seq.prefill_left = seq.prefill_target - seq.kv_tokens
        if seq.cached_tokens < 0:
            seq.cached_tokens = hits * self.block
        return True

    def take(self, count: int) -> None:
        """Blocks for new KV: free ones first, then the least recently used cached blocks no sequence holds."""
        free = min(count, self.free)
        self.free -= free
        for _ in range(count - free):
            self.cache.evict()  # pyright: ignore[reportOptionalMemberAccess] - spare() counts idle ones only with one

    def keep(self, seq: Any) -> None:
        """Hand the cache the sequence's keyed blocks that are full of computed KV and not handed yet."""
        keys, cache = seq.keys, self.cache
        if not keys or cache is None:
            return
        full = min(seq.kv_tokens // self.block, len(keys))
        for key in keys[seq.kept:full]:
            if cache.add(key):
                seq.held.append(key)
        seq.kept = max(seq.kept, full)

    def release(self, seq: Any) -> None:
        """Free the sequence's blocks (finished or preempted): its full keyed blocks stay cached, evictable once no
        sequence holds them, so its next turn or its own recompute finds them."""
        if self.cache is not None and seq.keys:
            self.keep(seq)
            self.cache.release(seq.held)
        self.free += seq.blocks - len(seq.held) + (self.fixed if seq.blocks else 0)
        seq.blocks, seq.held, seq.kept = 0, [], 0

    def in_use(self) -> int:
        """Blocks some running sequence holds, each once however many hold it."""
        return self.total - self.free - (len(self.cache.idle) if self.cache else 0)

    def shared_tokens(self) -> int:
        """Tokens the running sequences count more than once: cached blocks several of them hold."""
        return self.cache.shared_blocks * self.block if self.cache else 0
