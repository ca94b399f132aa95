#!/usr/bin/env bash
# `make demo`: the clicks_per_region example (examples/clicks_per_region/) end to end through Airflow.
#
# Resets the demo lake ($DEMO_LAKE, default build/demo_lake), ingests the example's regions and clicks,
# runs the clicks_per_region DAG once with `airflow dags test` (`pending`, then its task `run`, checked by its per-batch gate), then
# shows the table, checks it against the hand-computed expectation, and says where the Data Docs are.
# Expects the environment of the Makefile (AIRFLOW_HOME, AIRFLOW_CONN_SPARK_DEFAULT, ...): run it as `make demo`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEMO_LAKE="$(realpath -m "${DEMO_LAKE:-$ROOT/build/demo_lake}")"
EXAMPLE="$ROOT/examples/clicks_per_region"
LOG="${DEMO_LOG:-$(dirname "$DEMO_LAKE")/demo-airflow.log}"
ST="$ROOT/.venv/bin/streamtable"
PY="$ROOT/.venv/bin/python"

say() { printf '\n== %s\n' "$*"; }
fail() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }

say "resetting the demo lake $DEMO_LAKE"
rm -rf "$DEMO_LAKE"
mkdir -p "$DEMO_LAKE" "$(dirname "$LOG")"

say "ingesting the example: regions (alice moves asia -> europe at 10:02), then clicks"
"$ST" ingest user_regions "$EXAMPLE/user_regions.jsonl" --lake "$DEMO_LAKE"
"$ST" ingest user_clicks "$EXAMPLE/user_clicks.jsonl" --lake "$DEMO_LAKE"

say "running the clicks_per_region DAG through Airflow: airflow dags test clicks_per_region (its run task)"
echo "   (one spark-submit: the run, each batch checked by its quality gate; a minute or two on 2 cores; Airflow's log: $LOG)"
started=$(date +%s)
export STREAMTABLE_LAKE="$DEMO_LAKE" AIRFLOW_VAR_STREAMTABLE_LAKE="$DEMO_LAKE"
# clicks_per_region is a built-in pipeline, an example: its DAG is made only where asked (docs/install.md)
export STREAMTABLE_EXAMPLES=1 AIRFLOW_VAR_STREAMTABLE_EXAMPLES=1
status=0
"$ROOT/.venv/bin/airflow" dags test clicks_per_region >"$LOG" 2>&1 || status=$?
if (( status != 0 )) || ! grep -q "DagRun Finished: dag_id=clicks_per_region.*state=success" "$LOG"; then
  grep -E "\[DAG TEST\]|ERROR|Error|Traceback|state=" "$LOG" | tail -30 >&2 || true
  fail "the DAG run did not succeed (exit $status); full log: $LOG"
fi
grep -E "\[DAG TEST\] end task|DagRun Finished" "$LOG" | sed -E 's/^.*\[info *\] //; s/ \[airflow[^]]*\].*$//; s/, logical_date.*(state=[a-z]+).*/, \1/'
echo "   DAG run took $(( $(date +%s) - started )) s"

say "streamtable show clicks_per_region --lake $DEMO_LAKE"
result="$("$ST" show clicks_per_region --lake "$DEMO_LAKE")"
echo "$result"
if [[ "$result" == "$(cat "$EXAMPLE/expected_clicks_per_region.jsonl")" ]]; then
  echo "   as expected: americas 101 = 4+19+78, asia 137 = 13+25+99, europe 96 = 56+40"
  echo "   (alice's 13 clicks stay in asia: her move to europe at 10:02 came after them)"
else
  fail "expected $EXAMPLE/expected_clicks_per_region.jsonl:
$(cat "$EXAMPLE/expected_clicks_per_region.jsonl")"
fi

docs="$("$PY" -c 'import sys; from streamtable.storage.lake import Lake; from streamtable.quality.validation import docs_index; print(docs_index(Lake(__import__("pathlib").Path(sys.argv[1])).quality_dir))' "$DEMO_LAKE")"
say "Great Expectations Data Docs"
if [[ -f "$docs" ]]; then
  echo "   file://$docs"
else
  fail "no Data Docs at $docs"
fi
