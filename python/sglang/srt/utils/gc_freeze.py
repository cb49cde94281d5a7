"""Start-up's objects out of the cyclic garbage collector's reach, in every long-lived process.

Each process of a server (the HTTP processes, a scheduler, the detokenizer) imports large
libraries and builds its state once, then runs a loop that allocates a little per request. The
collector's full passes walked all of start-up's objects each time: ~0.1 s of CPU in an HTTP
process, 0.13-0.17 s in a scheduler (~220k objects with torch and the model), where the pass runs
on the forward's own thread, so a batch stood still meanwhile and its OpenMP peer spun (issue #32).
"""

from __future__ import annotations

import gc

YOUNG_GC_THRESHOLD = 50_000  # net allocations between collections of the youngest generation (default 700)


def freeze_startup_objects() -> None:
    """Collect start-up's garbage, then freeze what is alive (modules, the tokenizer or the model,
    the app): frozen objects are still freed by reference counting, only cycles among them are
    never collected, which suits objects living as long as the process.

    The youngest generation's threshold then goes from 700 to YOUNG_GC_THRESHOLD. The count it is
    compared with is allocations minus deallocations since the last collection, floored at zero, so
    the objects of requests in flight (a few thousand under 64 clients) that die after a collection
    are not subtracted again and the count creeps up: at 700 an HTTP process collected every few
    requests (0.036 CPU-ms per request), at 7000 every ~130 requests, each pass walking every
    in-flight object (3.4 ms, 0.027 CPU-ms per request), and at 50,000 not once in 6,000 requests
    (64 clients, single texts, benchmark/NOTES.md). A pass costs what is alive, not the threshold.
    The request path leaves almost no cyclic garbage (~0.3 objects per request); at worst 50,000
    young objects (a few MB) wait for the next pass."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
