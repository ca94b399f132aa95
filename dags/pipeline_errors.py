"""
### Pipeline files that did not load

Not a DAG: when a pipeline file of `streamtable_pipelines` (the Variable, else the env `STREAMTABLE_PIPELINES`)
cannot be imported, or declares something
inconsistent, parsing this file fails with one line per such file (file, line, what is wrong), so
Airflow lists it under *Import errors*. Every other pipeline's DAGs (`dags/pipelines.py`) still load.
"""

from __future__ import annotations

from streamtable.airflow_tasks import registered

errors = registered()["errors"]
if errors:
    raise ImportError("streamtable pipeline files that did not load:\n" + "\n".join(errors))
