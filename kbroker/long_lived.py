"""Keep the broker's long-lived objects out of the cyclic garbage collector's full passes.

CPython's full (generation 2) collection walks every container object it tracks, and it
runs again each time the objects that survived into that generation grow by a quarter.
A broker taking up thousands of partitions grows its heap by tens of objects per
partition, so the full passes come during the growth and each takes longer than the one
before: while a 10,000-partition topic was being created they held the event loop (and
every thread, through the GIL) for 50, 80 and 130 ms, the longest pauses that Metadata
and Produce of other clients saw.

Partitions, logs, the metadata image and what the broker built at start-up live until
they are deleted, so after start-up and after each thousand partitions taken up the
broker collects what is unreachable among the objects not yet frozen (a pass over those
only) and moves the survivors to the collector's permanent generation (`gc.freeze`),
which full passes skip. Objects there are still freed by reference counting when they
are dropped; only a reference cycle that becomes garbage after being frozen stays until
the process ends, and the objects frozen are the long-lived ones, whose teardown drops
them by reference counting.
"""

from __future__ import annotations

import gc

PARTITIONS_BETWEEN_FREEZES = 1000


def freeze_survivors() -> None:
    """Collect the unreachable objects not yet frozen; freeze the rest."""
    gc.collect()
    gc.freeze()
