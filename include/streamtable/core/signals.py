"""Stopping on SIGTERM without a lock: a handler that only sets a flag, and a wait that the flag cuts short.

Python runs a signal's handler in the main thread, between two bytecodes of whatever that thread is doing then. A
handler that takes a lock waits forever when the main thread holds that lock at that moment: `threading.Event.set`
takes the event's lock, which the main thread's own `Event.wait` holds for a few bytecodes at the start and the end
of every wait. A SIGTERM that landed there left `ingest DIR --follow` waiting for itself, deaf to every later
SIGTERM, until it was killed (a CI run: more than an hour). `SignalStop` takes no lock: its handler assigns an
attribute, and its `wait` sleeps in short slices, looking at the flag between them (a signal ends the slice it
arrives in: its handler runs, then the sleep goes on for the rest of the slice).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SLICE_S = 0.05  # how long a wait sleeps between two looks at the flag: how late a stop can be seen


class SignalStop:
    """A stop flag that a signal handler may set: `set`, `is_set` and `wait(timeout)` as a `threading.Event`'s,
    without its lock. Set only from the main thread (the handler runs there); read from any."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True  # one assignment: nothing a handler could wait for

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep until the flag is set or `timeout` seconds have passed; whether it is set."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, SLICE_S))
        return self._set


@contextmanager
def until_sigterm(stop: threading.Event | None, install: bool = True) -> Iterator[threading.Event | SignalStop]:
    """`stop` when a caller gives one; else a `SignalStop` that SIGTERM sets during the block, when `install` and this
    is the main thread (only it can install a handler), or that nothing sets."""
    if stop is not None:
        yield stop
    elif install and threading.current_thread() is threading.main_thread():
        stopping = SignalStop()
        previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        try:
            yield stopping
        finally:
            signal.signal(signal.SIGTERM, previous)  # the handler before the block, back
    else:
        yield SignalStop()
