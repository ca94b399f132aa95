"""The fault campaign's parts; `scripts/fault_campaign.py` runs it (docs/faults.md), with `tests/` on `sys.path` for
the independent model (tests/reference.py).

- `model`: the clicks it feeds and what the lake must then hold;
- `command`: a `streamtable` command as a child process group, logged, killed whole;
- `phases`: where a command is, from its log, the swap marker and the output's last commit;
- `report`: the tally it prints;
- `cluster`: a Spark standalone cluster of its own, whose executors it kills;
- `campaign`: the commands it runs to completion, the input it feeds and the checks against the model;
- `readers`: `show`, `query` and `status` racing the kills;
- `killers`: one kill per command, at a random moment or phase.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
