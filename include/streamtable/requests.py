"""Requests of `reprocess` and `reset` (an Airflow trigger form, or the command's own arguments) checked, and the
arguments of `streamtable reprocess` / `reset` they become. Spark-free: `cli/` and `airflow/` both use it.

Airflow tasks call these before they spark-submit anything, so a bad request fails in about a second with one
line saying what is wrong; the command checks again when it runs (`lifecycle.check_version`, `version_at`).
Nothing here imports pyspark or Airflow.
"""

from __future__ import annotations

from datetime import datetime

from streamtable.core.errors import BadInputError, OffsetOutOfRangeError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_pipeline, pipelines
from streamtable.core.timefmt import format_time, parse_time
from streamtable.storage.lake import Lake
from streamtable.storage.offsets import commits, first_version_since


def sought_input(spec: Pipeline, input_name: object) -> str:
    """The input a reprocess seeks in: `input_name`, or the primary when it is None or empty; BadInputError if the
    pipeline has no such input."""
    if input_name in (None, ""):
        return spec.primary
    if input_name not in spec.inputs:
        raise BadInputError(
            f"input {input_name!r} is not an input of {spec.name} (its inputs: {', '.join(spec.inputs)})"
        )
    return str(input_name)


def moment(from_timestamp: object) -> datetime:
    """The time a `from_timestamp` (ISO-8601 text) names; BadInputError saying why if it names none."""
    try:
        return parse_time(from_timestamp)
    except ValueError as e:
        raise BadInputError(f"from_timestamp: {e}") from None


def _describe_latest(history: list[tuple[int, float]]) -> str:
    version, committed = history[-1]
    return f"the latest, version {version}, was committed at {format_time(parse_time(int(committed)))}"


def reprocess_arguments(
    lake: Lake,
    pipeline: object,
    from_version: object = None,
    from_timestamp: object = None,
    dry_run: object = False,
    input_name: object = None,
) -> tuple[list[str], str]:
    """Check a reprocess request; return the arguments after `reprocess PIPELINE` and a one-line summary.

    Exactly one of `from_version` (an integer from 0 to the input's latest version) and `from_timestamp` (an
    ISO-8601 time at or before the input's latest commit) must be given; `input_name` is the input to seek in (empty:
    the primary). Raises BadInputError or OffsetOutOfRangeError with the reason.
    """
    spec = _known_pipeline(pipeline)
    primary = sought_input(spec, input_name)
    sought = [] if primary == spec.primary else ["--input", primary]
    if not isinstance(dry_run, bool):
        raise BadInputError(f"dry_run must be true or false, got {dry_run!r}")
    if from_timestamp == "":
        from_timestamp = None  # an emptied form field
    if from_version is not None and from_timestamp is not None:
        raise BadInputError(
            f"give from_version or from_timestamp, not both (got from_version={from_version!r} "
            f"and from_timestamp={from_timestamp!r})"
        )
    if from_version is None and from_timestamp is None:
        raise BadInputError(
            f"give from_version (a Delta version of {primary}, {pipeline}'s primary input) "
            "or from_timestamp (an ISO-8601 time); neither was given"
        )
    history = commits(lake, primary)
    if not history:
        raise OffsetOutOfRangeError(f"{primary}, {pipeline}'s primary input, has no data yet: nothing to reprocess")
    latest = history[-1][0]
    if from_version is not None:
        if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 0:
            raise BadInputError(f"from_version must be an integer >= 0, got {from_version!r}")
        if from_version > latest:
            raise OffsetOutOfRangeError(
                f"from_version {from_version} is beyond the latest version of {primary} (versions 0..{latest})"
            )
        start = ["--from-version", str(from_version)]
        origin = f"version {from_version}"
    else:
        since = moment(from_timestamp)
        found = first_version_since(lake, primary, since)
        if found is None:
            raise OffsetOutOfRangeError(
                f"no version of {primary} was committed at or after {since.isoformat()} ({_describe_latest(history)})"
            )
        start = ["--from-timestamp", since.isoformat()]
        origin = f"{since.isoformat()} (version {found})"
    summary = f"{'dry run: ' if dry_run else ''}reprocess {pipeline} from {origin} of {primary} (versions 0..{latest})"
    return sought + start + (["--dry-run"] if dry_run else []), summary


def lookback_arguments(lake: Lake, pipeline: str, since: datetime) -> tuple[list[str], str] | None:
    """The arguments of a reprocess from the first version of the primary input committed at or after `since`.

    None when nothing was committed since then (there is nothing new to reprocess).
    """
    primary = get_pipeline(pipeline).primary
    version = first_version_since(lake, primary, since)
    if version is None:
        return None
    return (
        ["--from-timestamp", since.isoformat()],
        f"reprocess {pipeline} from {since.isoformat()}: version {version} of {primary} "
        f"(the first committed since then)",
    )


def _known_pipeline(pipeline: object) -> Pipeline:
    """The pipeline a request names, or BadInputError listing the pipelines."""
    if isinstance(pipeline, str) and pipeline in pipelines():
        return get_pipeline(pipeline)
    raise BadInputError(f"unknown pipeline {pipeline!r}; pipelines are: {', '.join(sorted(pipelines()))}")


def reset_arguments(pipeline: object, dry_run: object = True) -> tuple[list[str], str]:
    """Check a reset request; return the arguments after `reset PIPELINE` and a one-line summary."""
    _known_pipeline(pipeline)
    if not isinstance(dry_run, bool):
        raise BadInputError(f"dry_run must be true or false, got {dry_run!r}")
    if dry_run:
        return ["--dry-run"], f"dry run: list what a reset of {pipeline} would delete"
    return [], f"reset {pipeline}: forget its progress and outputs; its next run starts from version 0"
