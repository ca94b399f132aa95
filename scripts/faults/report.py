"""The campaign's tally: commands started, kills attempted and landed (by command and phase), reads, and what the
checks found lost, doubled or failed."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Report:
    seed: int
    kills_requested: int
    commands: Counter = field(default_factory=Counter)  # commands started, by name
    kills_attempted: Counter = field(default_factory=Counter)
    kills_landed: Counter = field(default_factory=Counter)
    phases: dict[str, Counter] = field(default_factory=dict)  # landed kills by command and phase
    reads: Counter = field(default_factory=Counter)
    checkpoints: int = 0
    records: int = 0
    records_lost: int = 0
    records_duplicated: int = 0
    input_lost: int = 0
    input_duplicated: int = 0
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def landed(self, command: str, phase: str) -> None:
        self.kills_landed[command] += 1
        self.phases.setdefault(command, Counter())[phase] += 1

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "kills_requested": self.kills_requested,
            "runs": sum(self.commands.values()),
            "commands": dict(self.commands),
            "kills_attempted": sum(self.kills_attempted.values()),
            "kills_landed": sum(self.kills_landed.values()),
            "kills_landed_by_command": dict(self.kills_landed),
            "phases": {c: dict(p) for c, p in self.phases.items()},
            "reads": dict(self.reads),
            "checkpoints": self.checkpoints,
            "records": self.records,
            "records_lost": self.records_lost,
            "records_duplicated": self.records_duplicated,
            "input_records_lost": self.input_lost,
            "input_records_duplicated": self.input_duplicated,
            "failures": self.failures,
            "wall_s": round(time.monotonic() - self.started, 1),
        }
