"""The benchmark suite's charts (matplotlib, PNG): throughput, serve's latency, and the drains' peak memory."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

GIB = 2**30


def throughput(results: list[dict], naive: dict | None, path: Path) -> None:
    """Records/s of each engine per pipeline (log scale), one panel per size, the naive design as a line."""
    sizes = sorted({r["size"] for r in results})
    figure, axes = plt.subplots(len(sizes), 1, figsize=(11, 4.2 * len(sizes)), squeeze=False)
    for ax, size in zip(axes[:, 0], sizes, strict=True):
        rows = [r for r in results if r["size"] == size]
        engines = list(rows[0]["records_per_s"])
        width = 0.8 / len(engines)
        for i, engine in enumerate(engines):
            xs = [x + (i - (len(engines) - 1) / 2) * width for x in range(len(rows))]
            ax.bar(xs, [r["records_per_s"][engine] for r in rows], width, label=engine)
        if naive and "records_per_s" in naive:
            ax.axhline(naive["records_per_s"], color="black", linestyle="--", linewidth=1)
            ax.annotate(f"naive design: {naive['records_per_s']:,} clicks/s", (0, naive["records_per_s"]), va="bottom")
        ax.set_xticks(range(len(rows)), [f"{r['pipeline']}\n{r['records']:,}" for r in rows], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("records/s")
        ax.set_title(f"Bounded drain of about {size:,} records: cold streamtable run vs cold Spark batch vs DuckDB")
        ax.legend(fontsize=8)
    save(figure, path)


def latency(summaries: list[dict], path: Path) -> None:
    """p50 and p99 latency against the ingest rate, per served pipeline, with the 10k events/s targets."""
    figure, ax = plt.subplots(figsize=(8, 4.5))
    for summary in summaries:
        phases = summary["phases"]
        rates = [p["rate_per_s"] for p in phases]
        line = ax.plot(rates, [p["p50_s"] for p in phases], marker="o", label=f"{summary['pipeline']} p50")[0]
        ax.plot(
            rates,
            [p["p99_s"] for p in phases],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{summary['pipeline']} p99",
        )
    for seconds, name in ((3, "p50 target"), (6, "p99 target")):
        ax.axhline(seconds, color="grey", linestyle=":", linewidth=1)
        ax.annotate(name, (ax.get_xlim()[0], seconds), va="bottom", fontsize=8, color="grey")
    ax.axvline(10_000, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("events/s ingested")
    ax.set_ylabel("seconds from ingest commit to output")
    ax.set_title("streamtable serve --interval '1 second': latency against ingest rate")
    ax.legend(fontsize=8)
    save(figure, path)


def memory(results: list[dict], path: Path) -> None:
    """Peak memory (PSS) of each Spark process tree (drain and batch job), with the 2.5 GiB target."""
    figure, ax = plt.subplots(figsize=(11, 4.5))
    engines = sorted({e for r in results for e in r["peak_pss_bytes"]}, reverse=True)
    width = 0.8 / max(1, len(engines))
    for i, engine in enumerate(engines):
        xs = [x + (i - (len(engines) - 1) / 2) * width for x in range(len(results))]
        ax.bar(xs, [r["peak_pss_bytes"].get(engine, 0) / GIB for r in results], width, label=engine)
    ax.axhline(2.5, color="red", linestyle="--", linewidth=1, label="2.5 GiB target (1M drain)")
    ax.set_xticks(range(len(results)), [f"{r['pipeline']}\n{r['records']:,}" for r in results], fontsize=8)
    ax.set_ylabel("peak PSS, GiB (process tree)")
    ax.set_title("Peak memory (PSS) of the cold drain and of the Spark batch job")
    ax.legend(fontsize=8)
    save(figure, path)


def save(figure: plt.Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
