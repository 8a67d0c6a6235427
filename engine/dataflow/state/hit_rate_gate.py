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
When a memory budget gives a cache a bigger share (``retried``), the cache is judged afresh
(``reset(warm=True)``), and the first window after that only warms it: started empty or small, a
cache whose working set fits its new share was set aside again by that window
(``bench.memory_budget --busy``: a view's join cache given 25 MB instead of 2.5 MB).
"""

from __future__ import annotations

#: the share of keys read that a cache must find to stay in use
MIN_HIT_RATE = 0.5
#: keys read between two judgements
WINDOW_KEYS = 20_000
#: keys read past a cache that was judged not to pay, before it is tried again
BYPASS_KEYS = 500_000


class HitRateGate:
    __slots__ = ("bypass", "_read", "_found", "_cold")

    def __init__(self) -> None:
        self.bypass = 0  # keys still to read past the cache (> 0: it is aside)
        self._read = 0
        self._found = 0
        self._cold = False  # the window under way only warms the cache: not judged

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
        poor = self._found < MIN_HIT_RATE * self._read and not self._cold
        self._read = self._found = 0
        self._cold = False
        if poor:
            self.bypass = BYPASS_KEYS
        return poor

    def reset(self, warm: bool = False) -> None:
        """In use again now (population fills the table: its reads are judged elsewhere); with
        ``warm``, the next window is not judged (a bigger share, tried again)."""
        self.bypass = self._read = self._found = 0
        self._cold = warm


def retried(gate: HitRateGate, had: int, given: int, aside_full_at: int | None) -> bool:
    """Whether a cache given a budget of ``given`` instead of ``had`` (bytes, or groups) is to be
    judged afresh (``reset``): when its gate set it aside while it was full at a smaller size
    (``aside_full_at``), or when its budget at least doubled (the window under way was of the
    smaller size; one judged afresh at every smaller step might never end).

    >>> gate = HitRateGate()
    >>> retried(gate, 10, 15, None), retried(gate, 10, 20, None)
    (False, True)
    >>> gate.bypass = 5  # aside
    >>> retried(gate, 10, 40, None), retried(gate, 10, 40, 10), retried(gate, 10, 40, 40)
    (False, True, False)
    """
    if gate.aside:
        return aside_full_at is not None and given > aside_full_at
    return given >= 2 * had
