"""What a run needs of the older commits of another job's Delta table, kept in the lake so that the next run reads only
the commits after it: the origin spans of the table's live data files (a keyed table read by its files) and what the
log says of its Change Data Feed and of updates since the log's first version (a table input's `external.check`).

Each is a fold of the table's log up to a version, and a version's commit never changes: a summary is one JSON object,
`<lake>/_other_jobs/<table id>/<kind>-<version>.json`, written whole in one put, and a run goes on from the newest one
at or below the version it needs, reading the commits after it. A summary is used only when the commit of its version
is still the one the log holds (a table made again at the same path has another id, and other commits); one that is
missing or unreadable is made again from an older one or from the log. So a kill anywhere loses at most a summary,
never a result: nothing here is state, only what the log said, kept to be read once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import TypeVar

from deltalake import DeltaTable

from streamtable.core.errors import BadInputError
from streamtable.storage.lake import Lake
from streamtable.storage.other_job_log import Commit, Origin, add_origins, commit, commits
from streamtable.storage.row_versions import Span, add_spans
from streamtable.storage.store import join

SUMMARIES = "_other_jobs"
T = TypeVar("T", Origin, Span)
KEEP = 3  # summaries of one kind kept per table: the newest (older ones are removed once a newer one is written)


@dataclass(frozen=True)
class Seen:
    """A commit a summary names: its version and operation."""

    version: int
    operation: str


@dataclass(frozen=True)
class FeedStory:
    """What the commits from `start` on say of the Change Data Feed and of updates (`external.check`'s verdict)."""

    start: int
    feed: bool  # the feed is on at every version from `start` read so far
    feed_from: int | None  # ... on since this version (for the message)
    changed: Seen | None  # the first commit that updates or deletes rows
    off: Seen | None  # the commit that turned the feed off, when one did after `start`

    def after(self, c: Commit) -> FeedStory:
        """The story once commit `c` (the next version) is read too."""
        feed, feed_from, off = self.feed, self.feed_from, self.off
        if c.change_feed is not None and c.version > self.start:
            off = Seen(c.version, c.operation) if feed and not c.change_feed else off
            feed = feed and c.change_feed
            feed_from = (feed_from if feed_from is not None else c.version) if c.change_feed else None
        changed = self.changed or (Seen(c.version, c.operation) if c.changes_rows else None)
        return FeedStory(self.start, feed, feed_from, changed, off)


def feed_story(
    lake: Lake | None,
    delta: DeltaTable,
    path: str,
    start: int,
    last: int,
    feed_at_start: Callable[[], bool],
    keep: bool = True,
) -> FeedStory:
    """The feed's story of versions `start`..`last` of the table at `path` (`delta`, open), from the newest summary
    kept for `start` and the commits after it (`feed_at_start`: whether the feed is on at `start`, asked only when
    there is none), kept as a new summary unless not `keep`. Without a `lake`, from the commits alone."""
    kind = f"feed-from-{start}"
    kept = _newest(lake, delta, path, kind, last) if lake is not None else None
    if kept is None:
        on = feed_at_start()
        story, version = FeedStory(start, on, start if on else None, None, None), start - 1
    else:
        version, value = kept
        story = FeedStory(start, value["feed"], value["feed_from"], _seen(value["changed"]), _seen(value["off"]))
    for c in commits(path, version + 1, last):
        story = story.after(c)
    if lake is not None and keep and version < last:
        _keep(lake, delta, path, kind, last, _story_json(story))
    return story


def live_origins(
    lake: Lake,
    delta: DeltaTable,
    path: str,
    last: int,
    check: Callable[[Commit, dict[str, Origin]], None] | None = None,
    checked_from: int = 0,
    keep: bool = True,
) -> dict[str, Origin]:
    """The origin spans (`other_job_log.origins`) of the data files live at version `last` of the table at `path`.

    Read from the newest summary kept at or below `last` and the commits after it (kept as a new summary unless not
    `keep`); with `check`, from one below `checked_from`, and `check` sees each commit from `checked_from` on with the
    origins once it is read.
    """

    def step(found: dict[str, Origin], c: Commit) -> None:
        add_origins(found, c)  # (a rewrite's new files span those it removes: added first)
        for name in set(c.removed) - set(c.added):
            found.pop(name, None)
        if check is not None and c.version >= checked_from:
            check(c, found)

    below = last if check is None else min(last, checked_from - 1)
    kept = _newest(lake, delta, path, "origins", below)
    found = {name: Origin(*span) for name, span in kept[1].items()} if kept else {}
    _fold(lake, delta, path, "origins", kept[0] if kept else -1, last, found, step, astuple, keep)
    return found


def file_spans(lake: Lake, delta: DeltaTable, path: str, first: int, last: int) -> dict[str, Span]:
    """`row_versions.spans` of versions `first`..`last` of the table at `path`, from the newest summary kept for
    `first` at or below `last` and the commits after it."""
    kind = f"spans-from-{first}"
    kept = _newest(lake, delta, path, kind, last)
    found = {name: (span[0], span[1]) for name, span in kept[1].items()} if kept else {}
    _fold(
        lake, delta, path, kind, kept[0] if kept else first - 1, last, found, lambda f, c: add_spans(f, c, first), tuple
    )
    return found


def kept_at(lake: Lake, delta: DeltaTable, path: str, kind: str, version: int) -> object | None:
    """The value of the summary `kind` kept at `version` itself (None when there is none, or the log holds another
    commit at that version). One whose commit the log no longer holds is the table's (the folder is its id's)."""
    found = lake.store.read_json(join(_folder(lake, delta), f"{kind}-{version}.json"))
    if found is None:
        return None
    stamp = _stamp(path, version)
    return found["value"] if stamp is None or found.get("commit") == stamp else None


def keep_at(lake: Lake, delta: DeltaTable, path: str, kind: str, version: int, value: object) -> None:
    """Keep `value` as the summary `kind` at `version` (a fact of the table at that version, read by `kept_at`)."""
    _keep(lake, delta, path, kind, version, value)


def _fold(
    lake: Lake,
    delta: DeltaTable,
    path: str,
    kind: str,
    version: int,
    last: int,
    found: dict[str, T],
    step: Callable[[dict[str, T], Commit], None],
    plain: Callable[[T], tuple],
    keep: bool = True,
) -> None:
    """Fold the commits after `version` up to `last` into `found` (what the summary `kind` says at `version`), and
    (when `keep`) keep it as the summary at `last` (each value as the list of its `plain` tuple)."""
    for c in commits(path, version + 1, last):
        step(found, c)
    if keep and version < last:
        _keep(lake, delta, path, kind, last, {name: list(plain(value)) for name, value in found.items()})


def _newest(lake: Lake, delta: DeltaTable, path: str, kind: str, last: int) -> tuple[int, dict] | None:
    """The newest summary `kind` kept at a version <= `last` whose commit is still the log's: (version, value)."""
    folder = _folder(lake, delta)
    for version in sorted((v for v in _versions(lake, folder, kind) if v <= last), reverse=True):
        found = lake.store.read_json(join(folder, f"{kind}-{version}.json"))
        stamp = _stamp(path, version) if found is not None else None
        if stamp is not None and found is not None and found.get("commit") == stamp:
            return version, found["value"]
    return None


def _keep(lake: Lake, delta: DeltaTable, path: str, kind: str, version: int, value: object) -> None:
    """Write the summary `kind` at `version` (whole, in one put) unless it is kept already, and remove the ones older
    than the newest KEEP."""
    folder = _folder(lake, delta)
    kept = sorted(_versions(lake, folder, kind))
    if version in kept:
        return
    lake.store.write_json(join(folder, f"{kind}-{version}.json"), {"commit": _stamp(path, version), "value": value})
    for old in sorted([*kept, version])[:-KEEP]:
        lake.store.delete(join(folder, f"{kind}-{old}.json"))


def _versions(lake: Lake, folder: str, kind: str) -> list[int]:
    pattern = re.compile(rf"{re.escape(kind)}-(\d+)\.json")
    return [int(m.group(1)) for name in lake.store.children(folder) if (m := pattern.fullmatch(name))]


def _folder(lake: Lake, delta: DeltaTable) -> str:
    return lake.path(SUMMARIES, str(delta.metadata().id))


def _stamp(path: str, version: int) -> list | None:
    """What identifies the commit `version` (its time and operation); None when the log no longer holds it."""
    try:
        c = commit(path, version)
    except BadInputError:
        return None
    return [c.timestamp, c.operation]


def _seen(value: list | None) -> Seen | None:
    return None if value is None else Seen(value[0], value[1])


def _story_json(story: FeedStory) -> dict:
    seen = {
        k: None if s is None else [s.version, s.operation] for k, s in (("changed", story.changed), ("off", story.off))
    }
    return {"feed": story.feed, "feed_from": story.feed_from} | seen
