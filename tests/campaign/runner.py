"""Run a generated case through the test driver (in this process) or the CLI, and compare with its model.

Each case gets a folder of its own: `pipelines/` (the pipeline file), `landing/INPUT/` (the files of each run, in
name order), the lake, and on a failure `failure.txt` and `replay.sh` (the same inputs through the CLI).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from campaign.cases import Case, Ingest, Output
from campaign.values import arrow_type, arrow_value, csv_cell, json_text, shown

ROOT = Path(__file__).resolve().parents[2]
STREAMTABLE = ROOT / ".venv" / "bin" / "streamtable"
FAR = datetime(2026, 3, 2, tzinfo=UTC)  # the wall clock of a case that draws none: past every record's time
WALL_CLOCK = "STREAMTABLE_WALL_CLOCK"  # the CLI's injectable wall clock (docs/pipelines.md)


def write_file(case: Case, ingest: Ingest, folder: Path, index: int, rng) -> Path | None:
    """The ingest's records as a file of its format in `folder` (None for `pipe`); an undeclared `seq` rides along."""
    inp = case.inputs[ingest.input]
    names = [n for n, _, _ in inp.columns]
    folder.mkdir(parents=True, exist_ok=True)
    fmt = ingest.format
    if fmt in ("jsonl", "pipe"):
        path = folder / f"{index:03d}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for r in ingest.records:
                parts = [f"{json.dumps(n)}: {json_text(rng, t, r[n])}" for n, t, _ in inp.columns if r[n] is not None]
                f.write("{" + ", ".join([*parts, f'"seq": {r["seq"]}']) + "}\n")
    elif fmt == "csv":
        path = folder / f"{index:03d}.csv"
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow([*names, "seq"])
            for r in ingest.records:
                w.writerow([*[csv_cell(rng, t, r[n]) for n, t, _ in inp.columns], r["seq"]])
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [*[pa.field(n, arrow_type(rng, t), nullable=nl) for n, t, nl in inp.columns], pa.field("seq", pa.int64())]
        )
        rows = [{**{n: arrow_value(t, r[n]) for n, t, _ in inp.columns}, "seq": r["seq"]} for r in ingest.records]
        path = folder / f"{index:03d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema), path)
    return path


def prepare(case: Case, folder: Path) -> list[list[tuple[Ingest, Path]]]:
    """Write the pipeline file and every run's input files; returns each run's (ingest, file)."""
    import random

    rng = random.Random(case.seed * 7919)
    (folder / "pipelines").mkdir(parents=True, exist_ok=True)
    (folder / "pipelines" / f"{case.pipeline}.py").write_text(case.source.replace("@@JOB@@", str(folder / "job")))
    written, index = [], 0
    for r, run in enumerate(case.runs):
        files = []
        for ingest in run:
            index += 1
            sub = folder / "landing" / ingest.input / f"run{r}"
            files.append((ingest, write_file(case, ingest, sub, index, rng)))
        written.append(files)
    return written


def write_versions(case: Case, folder: Path, run: int) -> None:
    """The other jobs' commits before run `run` of a table-input case (delta-rs, Change Data Feed on unless the case is
    `without_feed`): `case.versions`
    is one input's runs of commits (its table at `job`), or per input (its table at `job_INPUT`)."""
    versions = getattr(case, "versions", [])
    per_input = versions if isinstance(versions, dict) else {"": versions}
    for name, runs in per_input.items():
        if run < len(runs):
            inp = case.inputs[name] if name else next(iter(case.inputs.values()))
            _commit(
                inp, str(folder / ("job_" + name if name else "job")), runs[run], getattr(case, "without_feed", False)
            )


def _commit(inp, path: str, commits: list, without_feed: bool) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    schema = pa.schema([pa.field(n, _exact_arrow(t), nullable=nl) for n, t, nl in inp.columns])
    revised = any(isinstance(r, dict) and "_rev" in r for _, payload in commits for r in payload)
    if revised:  # a table of records (`tables.draw_records`): each row has a `_rev` the pipeline does not declare
        schema = schema.append(pa.field("_rev", pa.int64(), nullable=False))
    for kind, payload in commits:
        if kind == "rekey":  # an UPDATE of rows' keys (`tables.rekey`)
            for r in payload:
                DeltaTable(path).update(updates={"id": f"'{r['id']}'"}, predicate=f"id = '{r['_was']}'")
            continue
        if kind in ("delete", "delete_rows"):
            column = "id" if kind == "delete" else "_rev"
            DeltaTable(path).delete(" OR ".join(f"{column} = {i!r}" for i in payload))
            continue
        data = pa.Table.from_pylist(
            [{n: arrow_value(t, r[n]) for n, t, _ in inp.columns} | _rev(r) for r in payload], schema
        )
        if not Path(path, "_delta_log").exists():
            write_deltalake(path, data, configuration={"delta.enableChangeDataFeed": str(not without_feed).lower()})
        elif kind == "append":
            write_deltalake(path, data, mode="append")
        elif kind == "overwrite":  # the table written again whole (`table_asof`)
            write_deltalake(path, data, mode="overwrite")
        elif kind == "rewrite":  # an UPDATE of the records with these `_rev`s
            DeltaTable(path).merge(
                data, "t._rev = s._rev", source_alias="s", target_alias="t"
            ).when_matched_update_all().execute()
        else:
            (
                DeltaTable(path)
                .merge(data, "t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )


def _rev(row: dict) -> dict:
    return {"_rev": row["_rev"]} if "_rev" in row else {}


def _exact_arrow(t):
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC") if t.kind == "timestamp" else arrow_type(__import__("random").Random(0), t)


def shown_tables(case: Case, inputs: bool) -> list[Output]:
    """The case's outputs, and with `inputs` its table inputs as a pipeline reads them (`Case.shown_inputs`), which
    `show` of another job's table must print."""
    return case.outputs + (case.shown_inputs if inputs else [])


def expected_rows(tables: list[Output]) -> dict[str, list[dict]]:
    return {o.name: _sorted([{n: shown(t, row[n]) for n, t, _ in o.columns} for row in o.rows], o.keys) for o in tables}


def _sorted(rows: list[dict], keys: list[str]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps([r[k] for k in keys], sort_keys=True, default=str))


def same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)  # type: ignore[arg-type]
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def compare(
    case: Case, actual: dict[str, list[dict]], late: int, quarantined: list[str], inputs: bool = False
) -> list[str]:
    """What differs from the model: the outputs, `late_events`, `quarantine`'s reasons and, with `inputs`, `show` of
    the table inputs."""
    problems = []
    want = getattr(case, "quarantined", [])
    if sorted(quarantined) != want:
        problems.append(f"quarantine: expected reasons {want}, got {sorted(quarantined)}")
    tables = shown_tables(case, inputs)
    for name, want in expected_rows(tables).items():
        got = _sorted(actual.get(name, []), next(o.keys for o in tables if o.name == name))
        if not same(got, want):
            problems.append(f"{name}: expected\n  {want}\ngot\n  {got}")
    if late != case.late:
        problems.append(f"late_events: expected {case.late} records, got {late}")
    return problems


def run_driver(case: Case, folder: Path) -> list[str]:
    """The case through `streamtable.testing`'s driver, in this process (its SparkSession made on first use)."""
    from streamtable.core import registry
    from streamtable.core.errors import BadInputError
    from streamtable.core.registry import get_input
    from streamtable.ingest.folders import KINDS, RefusedFile, ingest_landed_file
    from streamtable.testing import PipelineDriver

    runs = prepare(case, folder)
    if getattr(case, "refusal", None):  # a declaration the load-time check refuses: no Spark, no run
        return refused(case, folder, registry.load([folder / "pipelines"]).errors)
    os.environ[registry.ENV] = str(folder / "pipelines")
    registry.current.cache_clear()
    clocks = getattr(case, "clocks", None)  # each run's wall clock (clocks.py), else one past every record's time
    driver = PipelineDriver(case.pipeline, folder / "lake", wall_clock=clocks[0] if clocks else FAR)
    for r, files in enumerate(runs):
        write_versions(case, folder, r)
        for ingest, path in files:
            assert path is not None
            bad = sum(1 for r in ingest.records if "_reason" in r)  # the model's quarantined records (rules.py)
            if ingest.format == "pipe":
                result = driver.pipe(ingest.input, path.read_text(encoding="utf-8").splitlines())
            else:
                try:  # one file of a landing folder, as `ingest INPUT DIR` takes it
                    result = ingest_landed_file(
                        driver.lake, get_input(ingest.input), path, KINDS[path.suffix]
                    ).as_dict()
                except RefusedFile as e:
                    return [f"ingest {path}: refused: {e}"]
            if result["quarantined"] != bad or result["appended"] != len(ingest.records) - bad:
                return [
                    f"ingest {path}: {result}, expected {bad} quarantined {[q['reason'] for q in driver.quarantine()]}"
                ]
        if clocks:  # to this run's wall clock: the pipeline's ticks, if it declares them, are emitted at it
            driver.advance_wall_clock(clocks[r] - driver.wall_clock)
        try:
            driver.run()
        except BadInputError as e:  # a refusal in one line the case allows (`case.refusals`): never a wrong answer
            if "\n" in str(e) or not re.search(getattr(case, "refusals", r"(?!)"), str(e)):
                raise
            case.notes.append(f"refused at run {r}: {e}")
            return []
    actual = {}
    for o in case.outputs:
        types = {n: t for n, t, _ in o.columns}
        actual[o.name] = [{n: shown(types[n], v) for n, v in row.items()} for row in driver.output(o.name)]
    return compare(case, actual, len(driver.late_events()), [q["reason"] for q in driver.quarantine()])


def refused(case: Case, folder: Path, errors: list[str]) -> list[str]:
    """Problems unless `errors` is the one line naming the file, the line and the reason of `case.refusal`."""
    line, reason = case.refusal  # type: ignore[attr-defined]
    path = folder / "pipelines" / f"{case.pipeline}.py"
    expected = rf"{re.escape(str(path))}:{line}: {re.escape(reason)}"
    if len(errors) == 1 and re.match(expected, errors[0]):
        return []
    return [f"load: expected one line {path}:{line}: ...{reason}..., got {errors}"]


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cli_commands(case: Case, folder: Path) -> list[list[str]]:
    """The CLI commands that replay the case: per run, `ingest INPUT DIR` of its files, then `run`."""
    common = ["--pipelines", str(folder / "pipelines"), "--lake", str(folder / "cli-lake")]
    commands = []
    clocks = getattr(case, "clocks", None)
    for r, run in enumerate(case.runs):
        for inp in dict.fromkeys(i.input for i in run):
            commands.append([str(STREAMTABLE), "ingest", inp, str(folder / "landing" / inp / f"run{r}"), *common])
        at = [] if clocks is None else [f"{WALL_CLOCK}={iso(clocks[r])}"]
        if at and "ticks=Ticks(" in case.source:
            commands.append([str(STREAMTABLE), "emit-ticks", "--at", iso(clocks[r]), *common])
        commands.append([*(["env", *at] if at else []), str(STREAMTABLE), "run", case.pipeline, *common])
    for o in shown_tables(case, inputs=True):
        commands.append([str(STREAMTABLE), "show", o.name, *common])
    commands.append([str(STREAMTABLE), "show", "late_events", *common])
    commands.append([str(STREAMTABLE), "show", "quarantine", *common])
    return commands


def run_cli(case: Case, folder: Path) -> list[str]:
    """The case through the CLI (one process per command), its outputs read with `show`."""
    from streamtable.core import registry

    prepare(case, folder)
    for job in [folder / "job", *folder.glob("job_*")]:  # the other jobs' tables a driver's pass left: made anew
        shutil.rmtree(job, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != registry.ENV}  # the case's folder alone, not a driver's
    if getattr(case, "refusal", None):  # every command refuses the file; `pipelines` lists the others and exits 5
        done = subprocess.run(
            [str(STREAMTABLE), "pipelines", "--pipelines", str(folder / "pipelines")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        errors = [line.removeprefix("streamtable: ") for line in done.stderr.splitlines()]
        return refused(case, folder, errors) + ([] if done.returncode == 5 else [f"exited {done.returncode}, not 5"])
    printed: dict[str, list[dict]] = {}
    run = 0
    for command in cli_commands(case, folder):
        verb = command[command.index(str(STREAMTABLE)) + 1 :]
        if verb[0] == "run":
            write_versions(case, folder, run)
            run += 1
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        allowed = getattr(case, "refusals", None)  # (a refusal in one line, exit 2, the case allows)
        if verb[0] == "run" and done.returncode == 2 and allowed and re.search(allowed, done.stderr):
            lines = done.stderr.strip().splitlines()
            return [] if len(lines) == 1 else [f"run refused in {len(lines)} lines: {done.stderr}"]
        if done.returncode != 0:
            return [f"{shlex.join(verb[:2])} exited {done.returncode}: {done.stderr.strip()[-2000:]}"]
        if verb[0] == "show":
            printed[verb[1]] = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    late = len(printed.pop("late_events", []))
    return compare(case, printed, late, [q["reason"] for q in printed.pop("quarantine", [])], inputs=True)


def report(case: Case, folder: Path, problems: list[str], how: str) -> str:
    """Write the failure's files (the pipeline file and inputs are there already) and return its summary."""
    script = [
        "#!/bin/sh",
        "# the case through the CLI, on a fresh lake of its own",
        "set -e",
        f"rm -rf {folder}/cli-lake",
    ]
    if getattr(case, "versions", None):
        script.insert(
            2,
            f"# a table input: {folder}/job holds the other job's table as it ends"
            f" (make campaign SEED={case.seed} N=1 writes it version by version)",
        )
    script += [shlex.join(c) for c in cli_commands(case, folder)]
    (folder / "replay.sh").write_text("\n".join(script) + "\n")
    (folder / "replay.sh").chmod(0o755)
    text = "\n".join(
        [
            f"case seed {case.seed} ({case.family}, {how}): {'; '.join(case.notes)}",
            f"  pipeline: {folder / 'pipelines' / (case.pipeline + '.py')}",
            f"  inputs:   {folder / 'landing'} (one folder per input and run)",
            f"  replay:   make campaign SEED={case.seed} N=1   (driver and CLI)   or   sh {folder / 'replay.sh'}",
            *[f"  {p}" for p in problems],
        ]
    )
    (folder / "failure.txt").write_text(text + "\n")
    expected = expected_rows(shown_tables(case, inputs=True))
    (folder / "expected.json").write_text(json.dumps(expected, indent=1, default=str))
    return text


def main_python() -> str:
    return sys.executable
