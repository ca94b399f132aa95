"""`streamtable status` of a pipeline far behind its input, on an `s3://` lake whose every request takes a round trip.

    eval "$(make -s object-store)"; .venv/bin/python bench/status_lag.py --versions 50 500 --delay-ms 20 --rounds 3

`status` counts the rows of each version a pipeline has not consumed (`records_behind`) from its log entry: one GET a
version. For each of `--versions`, a fresh lake in the bucket gets that many ingests of one click into
`user_clicks` (`clicks_per_region`'s primary input; nothing consumed them). Then `--rounds` cold `streamtable status
clicks_per_region` processes read it, each through a loopback proxy that holds every request `--delay-ms` before it
passes it on (the round trip of an object store in another building; this kernel has no `netem`), and once without
it. Each figure is a whole process (its ~1 s of Python start-up included); medians, with `records_behind` checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
STREAMTABLE = Path(sys.executable).with_name("streamtable")


class DelayingProxy:
    """A TCP proxy on loopback that holds each chunk a client sends `delay_s` before passing it on to `target`."""

    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target, self.delay_s = target, delay_s
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.port = 0

        async def serve() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            async with server:
                await server.serve_forever()

        threading.Thread(target=self.loop.run_until_complete, args=(serve(),), daemon=True).start()
        started.wait(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer, self.delay_s), self._pipe(up_reader, writer, 0.0))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
        try:
            while data := await reader.read(65536):
                if delay_s:
                    await asyncio.sleep(delay_s)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


def ingest_clicks(lake: str, versions: int) -> None:
    """`versions` ingests of one click each into `user_clicks` (one Delta version each)."""
    from streamtable.ingest.files import ingest_lines
    from streamtable.storage.lake import Lake

    at = Lake(lake)
    for i in range(versions):
        line = {"user": f"u{i % 7}", "clicks": 1, "event_time": f"2026-03-01T10:{i % 60:02d}:00Z"}
        ingest_lines(at, "user_clicks", [json.dumps(line)], ingest_id=f"bench-{i}")


def status_seconds(lake: str, endpoint: str) -> tuple[float, int]:
    """One cold `streamtable status clicks_per_region` against `endpoint`: its wall time and `records_behind`."""
    env = os.environ | {"AWS_ENDPOINT_URL": endpoint}
    started = time.perf_counter()
    done = subprocess.run(
        [str(STREAMTABLE), "status", "clicks_per_region", "--lake", lake], env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"status exited {done.returncode}: {done.stderr.strip()}")
    lag = next(i for i in json.loads(done.stdout)["inputs"] if i["table"] == "user_clicks")
    return took, lag["records_behind"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        raise SystemExit('no object store: eval "$(make -s object-store)" first')
    parts = urlsplit(endpoint)
    proxy = DelayingProxy((parts.hostname or "127.0.0.1", parts.port or 80), args.delay_ms / 1000)
    slow = f"{parts.scheme}://127.0.0.1:{proxy.port}"
    results = []
    for versions in args.versions:
        lake = f"s3://streamtable/bench-status-{uuid.uuid4().hex[:8]}"
        ingest_clicks(lake, versions)
        figures = {}
        for name, at in (("direct", endpoint), (f"+{args.delay_ms:g} ms a request", slow)):
            runs = [status_seconds(lake, at) for _ in range(args.rounds)]
            if any(behind != versions for _, behind in runs):
                raise SystemExit(f"records_behind {[b for _, b in runs]}, not {versions}")
            figures[name] = round(statistics.median(t for t, _ in runs), 2)
        results.append({"versions": versions} | figures)
        print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
