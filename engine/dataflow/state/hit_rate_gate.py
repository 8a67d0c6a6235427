"""When a cache of state entries in front of a table stops paying, it steps aside for a while.

A cache of recently written entries (``EntryCache``, ``GroupTable``) costs every key a lookup and
every write an update (~0.5-1 us a key: dict probes that mostly miss the CPU cache, evictions);
a point read of a memory-mapped table costs ~1-2 us (``store._options``). Updates spread over
many keys find few of their keys in it (``bench.dataflow``'s join ~20%, the Q18-shaped group-by
~27%), and then the cache only adds its cost. ``HitRateGate`` judges the keys read outside
population: every ``WINDOW_KEYS`` keys, if under ``MIN_HIT_RATE`` of them were found, it says so
(the cache then empties itself) and keeps the cache aside for the next ``BYPASS_KEYS`` keys read,
during which the cache holds and takes nothing; then the cache starts again, empty, and is judged
again. Because an aside cache is empty, no write that skips it can leave a stale value in it.
"""

from __future__ import annotations

#: the share of keys read that a cache must find to stay in use
MIN_HIT_RATE = 0.5
#: keys read between two judgements
WINDOW_KEYS = 20_000
#: keys read past a cache that was judged not to pay, before it is tried again
BYPASS_KEYS = 500_000


class HitRateGate:
    __slots__ = ("bypass", "_read", "_found")

    def __init__(self) -> None:
        self.bypass = 0  # keys still to read past the cache (> 0: it is aside)
        self._read = 0
        self._found = 0

    @property
    def aside(self) -> bool:
        """Whether the cache is aside: it holds nothing and must take nothing."""
        return self.bypass > 0

    def read_past(self, n: int) -> None:
        """Count ``n`` keys read past an aside cache."""
        self.bypass -= n

    def judge(self, read: int, found: int) -> bool:
        """Count ``read`` keys looked up in the cache, ``found`` of them there; True when the
        cache has just been judged not to pay: it must empty itself (it is aside from now)."""
        self._read += read
        self._found += found
        if self._read < WINDOW_KEYS:
            return False
        poor = self._found < MIN_HIT_RATE * self._read
        self._read = self._found = 0
        if poor:
            self.bypass = BYPASS_KEYS
        return poor

    def reset(self) -> None:
        """In use again now (population fills the table: its reads are judged elsewhere)."""
        self.bypass = self._read = self._found = 0
