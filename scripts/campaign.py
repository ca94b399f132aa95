"""`make campaign SEED=... N=...`: generated pipelines run through the test driver (and every CLI_EVERY-th through the
CLI too), each compared with its model. A failure prints its pipeline file, its inputs and the command that replays it.

    .venv/bin/python scripts/campaign.py --seed 1000 -n 200 [--family totals] [--cli-every 10] [--out build/campaign]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from campaign.cases import draw, families  # noqa: E402
from campaign.runner import report, run_cli, run_driver  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--family", action="append", choices=sorted(families()), help="only these (repeatable)")
    parser.add_argument("--cli-every", type=int, default=10, help="every Kth case through the CLI too (0: none)")
    parser.add_argument("--out", default=str(ROOT / "build" / "campaign"))
    args = parser.parse_args()
    out = Path(args.out)
    failures, started = [], time.monotonic()
    for i in range(args.n):
        seed = args.seed + i
        case = draw(seed, tuple(args.family or ()))
        folder = out / f"case-{seed}"
        shutil.rmtree(folder, ignore_errors=True)
        ways = [("driver", run_driver)] + ([("cli", run_cli)] if args.cli_every and i % args.cli_every == 0 else [])
        for how, run in ways:
            t0 = time.monotonic()
            try:
                problems = run(case, folder)
            except Exception as e:  # a failing run is a finding, not the campaign's end
                problems = [f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"]
                (folder / "traceback.txt").write_text(traceback.format_exc())
            took = time.monotonic() - t0
            if problems:
                failures.append(seed)
                print(report(case, folder, problems, how), flush=True)
                break
            print(f"ok   case {seed} ({case.family}, {how}) {took:.1f}s", flush=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(
        f"campaign seed {args.seed} n {args.n}: {args.n - len(failures)} passed, {len(failures)} failed "
        f"{failures} in {time.monotonic() - started:.0f}s",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
