"""The benchmark suite's short form (bench/suite.py at tiny sizes), so that `make bench` keeps working.

About 2 minutes on the 2-core machine, most of it four cold JVMs (a drain, its reprocess, a Spark batch
job, `serve`): so it drains clicks_per_region only, as the big drain's part at 300 clicks (the pipeline
with a naive design to compare with), serves word_count at one rate for 3 s, and leaves out
`batch_stages.py` and the cold starts (`cold_start.py`: a cold run, an Airflow DAG run and a run a live
serve takes, which the demo's, the CLI's and the serve tests start too). The other pipelines' Spark and
DuckDB answers are checked by the full suite, which stops with an error when they differ from the drain's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest

from helpers import ROOT
from streamtable.core.registry import get_pipeline
from streamtable.core.schema import arrow_schema
from streamtable.storage import delta_rs
from streamtable.storage.lake import Lake

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.extended  # the benchmark tooling, not the product: `make test-all`
def test_short_suite_answers_agree_and_it_writes_json_and_charts(tmp_path):
    options = "--records --big-clicks 300 --naive-clicks 300"  # the big drain's part, at 300 clicks, and its reprocess
    options += " --latency-pipelines word_count --rates 200 --seconds 3 --stage-batches 0 --cold-runs 0"
    command = [sys.executable, str(ROOT / "bench" / "suite.py"), *options.split()]
    command += ["--out", str(tmp_path / "suite.json"), "--charts", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    results = json.loads((tmp_path / "suite.json").read_text())
    [drain] = results["throughput"]
    assert drain["answers_equal"], drain["mismatches"]
    assert set(drain["seconds"]) == {"streamtable run", "Spark batch", "DuckDB"}
    assert drain["records"] == 300 and drain["peak_pss_bytes"]["streamtable run"] > 0
    assert drain["reprocess_seconds"] > 0 and drain["drain_stage_ms"]["read"] >= 0
    assert results["naive"].get("answers_equal", "skipped" in results["naive"]) is True
    [served] = results["latency"]
    assert served["phases"][0]["caught_up"] and served["phases"][0]["events"] == 600
    assert {t["target"].split(" ")[0] for t in results["targets"]} >= {"warm", "word_count", "peak"}
    for chart in ("throughput.png", "memory.png", "latency.png"):
        assert (tmp_path / chart).read_bytes().startswith(PNG)
    assert "| target | measured |" in proc.stdout


def test_a_filled_output_holds_each_key_once_named_as_its_events_and_sums_to_zero(tmp_path, monkeypatch):
    """bench/keyed_output.py's fill, the big outputs of bench/output_size.py (no Spark: the output made empty as a
    first batch makes it): keys 1000..N-1 once each, in a hashed order, in one commit that names itself, streamed a
    chunk at a time, with quantities summing to 0 (the gate's `sum_equals` keeps holding)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import keyed_output

    monkeypatch.setattr(keyed_output, "CHUNK", 2_000)
    lake = Lake(tmp_path / "lake")
    path = lake.table_path("inventory")
    delta_rs.ensure_table(path, arrow_schema(get_pipeline("inventory").output("inventory").columns))

    assert keyed_output.fill(lake, 7_000) == 1
    filled = delta_rs.delta_table(path).to_pyarrow_table()
    events = keyed_output.key_events(np.arange(1_000, 7_000), np.random.default_rng(0))
    assert sorted(zip(filled["store"].to_pylist(), filled["item"].to_pylist(), strict=True)) == sorted(
        zip(events["store"], events["item"], strict=True)
    )
    assert filled["item"].to_pylist()[:3] != ["i10", "i10", "i10"]  # not in key order
    assert pc.sum(filled["quantity"]).as_py() == 0
    assert delta_rs.log_entry(path, 1).info["bench"] == "keyed_output.fill"
