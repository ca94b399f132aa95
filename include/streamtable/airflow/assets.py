"""The Assets of streamtable's tables, and a micro-batch DAG's schedule: a cron, its inputs' Assets, or both.

Every table has one Asset, `table_asset(TABLE)`, named `streamtable.TABLE` with the URI `streamtable://tables/TABLE`:
the identity names the table, not where the lake is (a deployment has one lake, chosen when each task runs), so an
Asset fixed at parse time from another setting does not go stale when the lake moves. Where the table is, each event
says (`extra`). It is the same object wherever the table appears (an output's outlet, an input's schedule, a copier's
outlet): Airflow keeps one definition per Asset, the last one parsed, so an outlet without the watcher would take the
watcher away from a pipeline scheduled on the same table.

- An output's Asset is updated by its pipeline's micro-batch run on success (`output_assets`).
- Whoever wrote the table (`streamtable ingest` from a shell, the ingest DAG's copier, another job's Delta writer,
  another pipeline), its `AssetWatcher` updates it: a `DeltaVersionTrigger` in Airflow's triggerer that fires when
  the table's Delta version moves (`streamtable.airflow.watch`). Airflow runs a watcher only while an unpaused DAG is
  scheduled on its Asset, from the first parse that sees it so: a pipeline declared with `schedule="on_data"`, which
  is scheduled on any of its inputs' Assets (`micro_batch_schedule`).

The watcher reads the table where the lake is when the DAG file is parsed: the Variable `streamtable_lake`, else the
env `STREAMTABLE_LAKE` of the DAG processor, else `~/streamtable/lake` (the triggerer needs the same store access, e.g.
the AWS variables of an s3:// lake); another job's table, where its declaration says.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAny, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable

from streamtable.airflow.catalog import parse_time_variable, registered, registered_pipelines
from streamtable.airflow.tasks import LAKE_VARIABLE, TABLE_ASSET, env_lake
from streamtable.airflow.watch import DeltaVersionTrigger
from streamtable.core.pipeline import schedule_parts
from streamtable.storage.lake import Lake


def output_assets(pipeline: str) -> list[Asset]:
    """The Assets of `pipeline`'s output tables, whose events (`StreamtableSubmitOperator`) carry the lake and the
    table's URI in it."""
    return [table_asset(table["name"]) for table in registered_pipelines()[pipeline]["outputs"]]


def parse_time_lake() -> Lake:
    """The lake as the DAG processor sees it: the Variable, else the env, else ~/streamtable/lake (as `tasks.LAKE`)."""
    return Lake(parse_time_variable(LAKE_VARIABLE) or env_lake())


def table_asset(table: str) -> Asset:
    """The Asset of `table`, watched by a `DeltaVersionTrigger` on its Delta table (in the lake, or another job's table
    where its declaration puts it)."""
    path = registered().get("input_paths", {}).get(table) or parse_time_lake().table_path(table)
    trigger = DeltaVersionTrigger(table=table, path=path)
    return Asset(
        name=f"streamtable.{table}",
        uri=f"{TABLE_ASSET}{table}",
        watchers=[AssetWatcher(name=f"streamtable_delta_version_{table}", trigger=trigger)],
    )


def micro_batch_schedule(pipeline: dict) -> Any:
    """What a micro-batch DAG's `schedule` is: the pipeline's cron; on `on_data`, any of its inputs' Assets (one run
    per event the scheduler sees, queued behind the running one); on `on_data or CRON`, both."""
    on_data, cron = schedule_parts(pipeline["schedule"])
    if not on_data:
        return cron
    # the ticks' input is written by the DAG's own emit_ticks: watching it would wake the DAG by itself, for ever
    watched = [table for table in pipeline["inputs"] if table != pipeline.get("ticks_into")]
    assets = AssetAny(*(table_asset(table) for table in watched))
    if cron is None:
        return assets
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=assets)
