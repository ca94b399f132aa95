"""When the rows of another job's Delta table were written, as far as its log tells by file: for each data file of a
version, the span of versions (oldest, newest) its rows were written at. Spark-free: the log's commits
(`other_job_log`), read once per process.

A file a commit added with new rows holds rows of that version; one an OPTIMIZE made (a rewrite) spans the files it
compacted; one a commit that updated or deleted rows added without deletion vectors (copy-on-write) holds copies of
the rows it kept from the files it removed, and those it changed (of its own version, unless it is a DELETE): it spans
them. A file added again (its deletion vector changed) keeps its span: the vector only hides rows.
"""

from __future__ import annotations

from streamtable.storage.other_job_log import Commit, commits

Span = tuple[int, int]  # the oldest and the newest version a file's rows may have been written at


def spans(path: str, first: int, last: int) -> dict[str, Span]:
    """The base name of each data file versions `first`..`last` added -> its rows' span of versions; a file added
    before `first` is not in it (its rows are older than `first`)."""
    found: dict[str, Span] = {}
    for c in commits(path, first, last):
        add_spans(found, c, first)
    return found


def add_spans(found: dict[str, Span], c: Commit, first: int) -> None:
    """Map the data files commit `c` added to their rows' spans, in `found` (the spans of the files the commits from
    `first` before it added)."""
    older = (first - 1, first - 1)  # a file added before `first`
    compacted = [found.get(name, older) for name in c.replaced] or [(c.version, c.version)]
    rewrite = (min(s[0] for s in compacted), max(s[1] for s in compacted))
    rewritten = set(c.rewritten)
    copied = [found.get(name, older) for name in c.removed if name not in c.added] or [(first - 1, c.version)]
    kept = (min(s[0] for s in copied), max(s[1] for s in copied) if c.operation == "DELETE" else c.version)
    for name in c.added:
        if name in rewritten:
            found[name] = rewrite
        elif name not in found:  # (a file added again: a deletion vector changed, its rows did not)
            found[name] = kept if c.changes_rows else (c.version, c.version)


UNORDERED = (  # why two different rows of a key cannot be ordered by their spans, and what to do (after the version)
    " or before (one commit added both, an OPTIMIZE compacted them, or an UPDATE or MERGE without deletion vectors "
    "copied one into a new file), and the table's files do not say which is the later: refused; give each key one row "
    "(the other job's MERGE on its keys)"
)


def written_last(rows: list[tuple[dict, Span]]) -> tuple[dict, int | None]:
    """Of a key's rows, each with its file's span, the one written last (greatest newest, then oldest version), and
    None; or that row and the version at which another, different row may have been written as late (no order: the
    key is refused, `UNORDERED`). The rule `runtime.inputs.keyed_changes.written_per_key` applies in a Spark job."""
    row, (oldest, newest) = max(rows, key=lambda r: (r[1][1], r[1][0]))
    tied = any(other != row and span[1] >= oldest for other, span in rows)
    return row, newest if tied else None
