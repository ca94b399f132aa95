"""Leases: a lock that works across hosts, on a local lake and on object storage alike (there is no `flock` on S3).

A lease is one small JSON object in the lake's store: `{command, pid, host, since, token, renewals}`.

- acquire: put-if-absent of the object (or a compare-and-swap over a released one);
- hold: a background thread renews it every `ttl / 3` seconds by a compare-and-swap on its ETag (each renewal
  changes the content, so the ETag changes);
- take over: a waiter that sees the same ETag, unchanged, for longer than the TTL (measured on the waiter's own
  monotonic clock, so no two hosts' clocks are compared) replaces it with a compare-and-swap on that ETag: of
  several waiters exactly one wins;
- release: a compare-and-swap to `{"released": true}` if it is still ours (a conditional delete is not in every
  S3-compatible store; a released object is free to the next put).

A holder whose renewal fails (its lease was taken over: it stalled for a whole TTL) has lost it: `check()` raises
`LeaseLostError` in the holder's thread at its next check (before each commit and each commit's retry; a renewal
overdue is made there first, so a process resumed after being stopped for a TTL learns it at once), and `Lake.lock`
raises it when its block ends. What a stalled holder may still write in the moment before it checks is guarded by
Delta itself: every commit is a put-if-absent of its log entry (delta-rs, and Delta Spark on a local lake), and every
batch commits with its app transaction (`txnAppId`, `txnVersion`), so a batch the new holder commits again is skipped.

TTL: `STREAMTABLE_LEASE_SECONDS` (default 30 s). A holder that dies is taken over by the next waiter after the TTL;
`holder()` reports a lease of a dead process on this host as free at once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from streamtable.core.errors import StreamtableError
from streamtable.core.timefmt import format_time
from streamtable.storage.store import Store

log = logging.getLogger("streamtable.storage.lease")

DEFAULT_TTL_S = 30.0
RELEASED = {"released": True}


class LeaseLostError(StreamtableError):
    """This process's lease was taken over by another (it did not renew it for a whole TTL): it must stop writing."""


def lease_seconds() -> float:
    """The lease TTL: env STREAMTABLE_LEASE_SECONDS, else 30 s."""
    value = os.environ.get("STREAMTABLE_LEASE_SECONDS")
    return float(value) if value else DEFAULT_TTL_S


_HELD: set[Lease] = set()  # the leases this process holds now (`check_held`)
_HELD_LOCK = threading.Lock()


def check_held() -> None:
    """Raise LeaseLostError if a lease this process holds was lost (call before a commit)."""
    with _HELD_LOCK:
        held = list(_HELD)
    for lease in held:
        lease.check()


def _alive_here(entry: dict) -> bool:
    """False when the holder is a process of this host that no longer runs; True otherwise (it may run)."""
    if entry.get("host") != socket.gethostname() or not isinstance(entry.get("pid"), int):
        return True
    try:
        os.kill(entry["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _entry(data: bytes) -> dict:
    """A lease's content; an empty or unreadable one (a lock file of a release that used `flock`: leases are written
    whole, with one put) counts as released."""
    try:
        entry = json.loads(data)
    except ValueError:
        return RELEASED
    return entry if isinstance(entry, dict) and entry else RELEASED


def read_holder(store: Store, path: str) -> dict | None:
    """Who holds the lease at `path`: its `command`, `pid`, `host` and `since`; None when it is free (never taken,
    released, or held by a process of this host that is gone)."""
    found = store.read(path)
    return None if found is None else _holder(found.data)


def _holder(data: bytes) -> dict | None:
    """The holder a lease's content names (as `read_holder`), None when it is free."""
    entry = _entry(data)
    if entry.get("released") or not _alive_here(entry):
        return None
    return {k: v for k, v in entry.items() if k not in ("token", "renewals")}


class LeaseWatch:
    """Whether the process that held a lease still does: the same holder, its lease renewed within a TTL (a holder on
    another host that died keeps its entry until a waiter takes the lease over)."""

    def __init__(self, store: Store, path: str) -> None:
        self.store, self.path = store, path
        self.etag: str | None = None
        self.changed_at = time.monotonic()

    def held_by(self, holder: dict) -> bool:
        found = self.store.read(self.path)
        if found is None or _holder(found.data) != holder:
            return False
        if found.etag != self.etag:
            self.etag, self.changed_at = found.etag, time.monotonic()
        return time.monotonic() - self.changed_at < lease_seconds()


class Lease:
    """The lease at `path` in `store`, taken for `command` (`with Lease(...)` waits for it, holds it, releases it)."""

    def __init__(self, store: Store, path: str, command: str, ttl: float | None = None) -> None:
        self.store, self.path, self.command = store, path, command
        self.ttl = lease_seconds() if ttl is None else ttl
        self.token = uuid.uuid4().hex
        self._etag: str | None = None
        self._renewals = 0
        self._since = ""
        self._lost = False
        self._renewed_at = time.monotonic()  # (monotonic: it runs on while the process is stopped)
        self._renewing = threading.Lock()  # the renewing thread's and a check's renewals, one at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        entry: dict[str, Any] = {
            "command": self.command,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": self._since,
            "token": self.token,
            "renewals": self._renewals,
        }
        return json.dumps(entry).encode()

    def try_acquire(self, seen: dict[str, tuple[str, float]] | None = None) -> bool:
        """One attempt: take the lease if it is free, released, or expired (its ETag unchanged for a TTL in `seen`)."""
        self._since = format_time(datetime.now(UTC))
        etag = self.store.put_if_absent(self.path, self._body())
        if etag is None:
            found = self.store.read(self.path)
            if found is None:
                return False  # released and deleted meanwhile: the next attempt creates it
            entry = _entry(found.data)
            now = time.monotonic()
            first_seen = seen.get(self.path) if seen is not None else None
            if entry.get("released") or not _alive_here(entry):  # a holder of this host that died: free at once,
                expired = True  # as a flock was; another host's holder is waited for its TTL
            elif first_seen is None or first_seen[0] != found.etag:
                if seen is not None:
                    seen[self.path] = (found.etag, now)
                expired = False
            else:
                expired = now - first_seen[1] > self.ttl
            if not expired:
                return False
            etag = self.store.compare_and_swap(self.path, self._body(), found.etag)
            if etag is None:
                return False
            if not entry.get("released") and _alive_here(entry):
                log.warning("took over the lease %s from %s (not renewed for %.0f s)", self.path, entry, self.ttl)
        self._etag, self._renewed_at = etag, time.monotonic()
        self._start_renewing()
        return True

    def acquire(self) -> None:
        """Wait until the lease is this process's."""
        seen: dict[str, tuple[str, float]] = {}
        pause = min(0.5, self.ttl / 10)
        while not self.try_acquire(seen):
            time.sleep(pause)

    def _start_renewing(self) -> None:
        with _HELD_LOCK:
            _HELD.add(self)
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease {self.path}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            if not self.renew():
                return

    def renew(self) -> bool:
        """Renew the lease now; False (and lost) when another took it over."""
        with self._renewing:
            if self._etag is None or self._lost:
                return False
            self._renewals += 1
            began = time.monotonic()
            try:
                etag = self.store.compare_and_swap(self.path, self._body(), self._etag)
            except Exception as error:  # a store that does not answer: try again at the next renewal
                log.warning("renewing the lease %s failed: %s", self.path, error)
                return True
            if etag is None:
                self._lost = True
                log.error("lost the lease %s: another process took it over", self.path)
                return False
            self._etag, self._renewed_at = etag, began
            return True

    @property
    def lost(self) -> bool:
        return self._lost

    def check(self) -> None:
        """Raise LeaseLostError if the lease was taken over (the holder must stop writing). A renewal overdue (the
        process was stopped, or starved: its renewing thread did not run) is made now, so a holder resumed after a
        whole TTL learns at its check, not at its thread's next renewal, that another took the lease over."""
        if not self._lost and time.monotonic() - self._renewed_at > self.ttl / 2:
            self.renew()
        if self._lost:
            raise LeaseLostError(f"the lease {self.path} ({self.command}) was taken over by another process")

    def release(self) -> None:
        """Stop renewing; mark the lease released if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with _HELD_LOCK:
            _HELD.discard(self)
        if self._etag is not None and not self._lost:
            self.store.compare_and_swap(self.path, json.dumps(RELEASED).encode(), self._etag)
        self._etag = None

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        lost = self._lost
        self.release()
        if lost and error is None:
            raise LeaseLostError(f"the lease {self.path} ({self.command}) was taken over while it was held")
