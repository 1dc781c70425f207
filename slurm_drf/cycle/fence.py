"""The write phase under a lease: every batch of writes sent inside the hold (docs/operations.md, "Two head nodes").

Sits in the cycle between cycle.run and the writer. With two head nodes a
daemon may write to Slurm only while it holds the lease (cycle.lease): a
renewal holds LEASE_INTERVALS intervals, and the standby takes the lease
50 ms after the hold ends. Writing 2,000 values can take longer than that,
so the writes go in batches (`HoldFence.batches`), and before each batch:

1. the lease is renewed (`renew`, Lease.confirm), or LeaseLost is raised:
   a holder that lost it stops at once, and the error says after how many
   of its writes;
2. the batch is sized to take about BATCH_INTERVALS of an interval, and to
   end before the hold does, less MARGIN_INTERVALS, at the rate the last
   batches ran at (`Rate`: a part per batch, such as starting scontrol,
   and a part per write). The first batch is one write (nothing is known
   of the rate yet), and none is more than GROWTH times the last.

The margin is half an interval: the heads' clocks may disagree by that much
(the standby judges the hold's end by its own clock; docs/operations.md
asks for NTP, well under half an interval), and what is left of it covers
a batch that runs four times slower than the ones it was sized from
(slurmctld busy). Each batch is also handed the end of the hold less the
margin (`Batch.until`): the writers send nothing after it (they stop
scontrol, or pyslurm's updates, there; a scontrol that started after it,
the daemon paused between its look at the clock and the start, is stopped
before it reads a line; one running while the daemon is paused is stopped
there by timeout(1), execute.run_process_by). When not even one write fits in
what is left of a fresh hold (a renewal slower than an interval, or one
write that takes longer), the rest wait for the next cycle, said in one
line. `reset` has no next cycle: it renews again, up to RESET_TRIES fresh
holds in a row (a renewal slowed by a busy disk is seldom slow twice),
before it leaves the rest for another reset.

What no client of Slurm can bound: a write already sent when slurmctld
stalls lands when slurmctld answers, which may be after the hold ended.
Time is read on both the wall clock (the lease's) and the monotonic clock,
and the later reading counts: a paused process or a clock stepped back
cannot make a hold look longer than it is.

Without a lease (`renew` None) everything is one batch, as before.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from slurm_drf.cycle.lease import LEASE_INTERVALS, LeaseLost

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long one batch should take, in intervals (a quarter of the hold's usable part).
BATCH_INTERVALS: Final = 0.25
# Kept free at the end of each hold, in intervals: the clocks of the two heads.
MARGIN_INTERVALS: Final = 0.5
# A batch is at most this many times the last one.
GROWTH: Final = 4
# How many fresh holds in a row `reset` tries when one leaves no room for a write (a cycle tries one:
# its next cycle tries again).
RESET_TRIES: Final = 5


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """Items to send now, and when (time.monotonic()) the hold they are sent in ends, less the margin:
    a writer that can (`apply_until`) sends nothing after it. None without a lease."""

    items: Sequence[T]
    until: float | None = None


@dataclass(frozen=True, slots=True)
class Rate:
    """What a batch of writes costs: seconds per batch (starting scontrol) and per write."""

    per_batch: float
    per_write: float

    def seconds(self, size: int) -> float:
        return self.per_batch + self.per_write * size


def estimate_rate(last: tuple[int, float], before: tuple[int, float] | None, known: Rate | None) -> Rate:
    """The rate after a batch of `last` = (writes, seconds), the one `before` it and the rate `known` then.

    The line through the last two batches when their sizes differ and it
    makes sense (both parts at least 0); with two of one size, the known
    part per batch and the rest per write; otherwise all of it per write,
    which overestimates a bigger batch, never underestimates it.
    """
    size, seconds = last
    if before is not None and before[0] != size:
        per_write = (seconds - before[1]) / (size - before[0])
        per_batch = seconds - per_write * size
        if per_write > 0 and per_batch >= 0:
            return Rate(per_batch, per_write)
    elif known is not None and seconds > known.per_batch:
        return Rate(known.per_batch, (seconds - known.per_batch) / size)
    return Rate(0.0, seconds / size)


class HoldFence:
    """Renews the lease before each batch of writes and sizes each batch to end inside the hold."""

    def __init__(
        self,
        renew: Callable[[], None] | None,
        interval: float,
        *,
        tries: int = 1,
        then: str = "wait for the next cycle",
        wall: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        """`tries`: how many fresh holds in a row may leave no room for one write before the rest are
        given up on; `then`: what becomes of those, as the warning says it."""
        self.renew = renew
        self.interval = interval
        self.tries = tries
        self.then = then
        # The lease's clock and the process's (tests pass fakes).
        self.wall = wall or time.time
        self.monotonic = monotonic or time.monotonic

    def confirm(self, sent: int = 0, total: int = 0) -> None:
        """Renew the hold before the state is saved (after `sent` of `total` writes), or LeaseLost
        saying how far the writes got; nothing without a lease."""
        if self.renew is not None:
            self._renew(self.renew, sent, total)

    def batches(self, items: Sequence[T]) -> Iterator[Batch[T]]:
        """`items` in order, in batches; the caller sends each batch before it asks for the next, and
        stops asking when a batch was not all sent.

        Ends early (the rest for the next cycle, logged) when a write no
        longer fits in the hold; raises LeaseLost when another daemon holds
        the lease, saying how many items were handed out before.
        """
        renew = self.renew
        if renew is None:
            if items:
                yield Batch(items)
            return
        usable = (LEASE_INTERVALS - MARGIN_INTERVALS) * self.interval
        sent = 0
        last: tuple[int, float] | None = None
        rate: Rate | None = None
        misses = 0  # fresh holds in a row that left no room
        while sent < len(items):
            renewal = self._renew(renew, sent, len(items))
            left = usable - renewal  # the hold runs from before the renewal
            size = self._size(last[0] if last else 0, rate, left)
            if size < 1:
                misses += 1
                if misses < self.tries:
                    logger.info("the lease's hold left no room for a write (%.3f s): renewed again", max(0.0, left))
                    continue
                self._say_deferred(len(items) - sent, len(items), rate, renewal, left)
                return
            misses = 0
            began = self.monotonic()
            batch = Batch(items[sent : sent + size], began + left)
            yield batch
            done = (len(batch.items), self.monotonic() - began)
            rate = estimate_rate(done, last, rate)
            last = done
            sent += len(batch.items)

    def _renew(self, renew: Callable[[], None], sent: int, total: int) -> float:
        """Renew the hold; how long that took (the longer of the two clocks). LeaseLost when it is another's."""
        started_wall, started = self.wall(), self.monotonic()
        try:
            renew()
        except LeaseLost as lost:
            raise lost.stopped_after(sent, total) from lost
        return max(self.wall() - started_wall, self.monotonic() - started)

    def _size(self, last: int, rate: Rate | None, left: float) -> int:
        """The next batch: 1 at first, at least 2 next; then as many writes as take BATCH_INTERVALS at
        `rate` (twice the part per batch when that is longer, so that most of a batch's time writes;
        never longer than what is `left` of the hold), at most GROWTH times the `last`; 0 when not even
        one write fits."""
        if left <= 0:
            return 0
        if rate is None:
            return 1
        target = min(max(BATCH_INTERVALS * self.interval, 2 * rate.per_batch), left)
        size = min(GROWTH * last, math.floor((target - rate.per_batch) / rate.per_write))
        if last == 1 and size < 2 and rate.seconds(2) <= left:
            return 2  # the second batch: of another size than the first, so that the rate's two parts show
        if size >= 1:
            return size
        return 1 if rate.seconds(1) <= left else 0

    def _say_deferred(self, rest: int, total: int, rate: Rate | None, renewal: float, left: float) -> None:
        why = f"one write takes about {rate.seconds(1):.3f} s" if rate else f"the renewal took {renewal:.3f} s"
        logger.warning(
            "%d of %d write(s) %s: %s, and the lease's hold leaves %.3f s for it "
            "(%g intervals of %g s, less half an interval for the heads' clocks, less the renewal)",
            rest,
            total,
            self.then,
            why,
            max(0.0, left),
            LEASE_INTERVALS,
            self.interval,
        )


def reset_fence(
    renew: Callable[[], None] | None,
    interval: float,
    *,
    wall: Callable[[], float] | None = None,
    monotonic: Callable[[], float] | None = None,
) -> HoldFence:
    """`reset`'s fence: with no next cycle to leave the rest to, a hold that leaves no room is renewed
    again, up to RESET_TRIES in a row, before the rest are left for another reset."""
    return HoldFence(
        renew, interval, tries=RESET_TRIES, then="are left for another reset", wall=wall, monotonic=monotonic
    )
