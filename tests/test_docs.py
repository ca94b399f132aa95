"""README.md and docs/*.md stay true: every code block a user would run is run here, or named in RUN_ELSEWHERE.

Every fenced block has a language. `console`, `bash`, `sh` and `python` blocks are what a user runs;
`text` and `json` are output and illustrations. Each page's runnable blocks run in order, in a lake of their
own (a block may rely on an earlier block of its page; a page in CONTINUES goes on in the lake of the page
before it), with the repository as the working directory:

- a `streamtable ...` line runs in this process, through `streamtable.cli.main.main` with `--lake` pointed at
  the page's lake, on the session's SparkSession (no JVM per command); `streamtable serve ... &` runs in
  the main thread while a helper thread types the lines that follow, up to `kill -TERM %1`, which the
  helper sends once the served batches have caught up;
- any other shell line runs with bash (`.venv/bin` first on PATH, `STREAMTABLE_LAKE` the page's lake) and
  must exit 0 (or as EXIT_CODES says);
- a python block is exec'd in a temporary directory whose `lake` is the page's lake;
- a python block whose first line is a comment naming a file (`# include/...py`) is an excerpt a user
  reads: it must be verbatim in that file (a line `...` stands for lines left out), and is not run;
- a block fenced as ```` ```text output ```` must equal what the last command of the runnable block
  before it printed; one fenced as ```` ```json output vary=KEY,... ```` must hold the same JSON values as its
  JSON lines (a value may be folded over several lines), but for the values of the KEYs named (times, hashes),
  which must only be there (a time: in the form shown); an output block of a section in RUN_BY_TESTS_HERE
  is its dedicated test's to check;
- an illustration of what a command prints that no block runs (a broken file's line, a row of every type, a
  damaged log's line) has a dedicated test at the end of this file;
- a block fenced with ```` title="~/PATH" ```` is a file the user writes: it is written to PATH under the
  page's own home directory (`HOME` while the page runs, where `~` in command lines points), not run.

A runnable line that is not run here must be in RUN_ELSEWHERE, with the test or CI step that runs it (or why
nothing can). Blocks with a dedicated test below are in RUN_BY_TESTS_HERE.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from streamtable.cli import main as cli
from streamtable.core import registry
from streamtable.core.registry import get_pipeline, pipelines
from streamtable.core.schema import arrow_schema
from streamtable.runtime.observe.status import pipeline_status
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# docs/reference.md is generated from the docstrings, its examples are fragments of a `process`:
# tests/test_api_reference.py checks it.
GENERATED = {DOCS / "reference.md"}
PAGES = [README, *sorted(p for p in DOCS.glob("*.md") if p not in GENERATED)]
RUNNABLE = {"console", "bash", "sh", "python"}
ILLUSTRATIONS = {"text", "json"}
SPARK_COMMANDS = {"run", "serve", "reprocess", "reset", "validate"}

# Runnable lines not run by this file: the line (as shlex reads it, comments dropped) -> what runs it.
RUN_ELSEWHERE = {
    "make demo": "tests/test_dags.py::test_make_demo runs scripts/demo.sh, which is `make demo` after `make setup`",
    "make test": "CI: .ci/run runs `make test`",
    "make test-quick": "CI runs its superset, `make test`; tests/test_deploy.py checks the target with `make -n`",
    ".venv/bin/python -m pytest tests/test_call_analytics.py -q": "CI: `make test` runs tests/test_call_analytics.py",
    ".venv/bin/python -m pytest tests/test_windows.py::test_record_exactly_at_a_window_end_is_not_in_that_window": (
        "CI: `make test` runs tests/test_windows.py"
    ),
    "make lint": "CI: .ci/run runs `make lint`",
    ".venv/bin/python -m pytest -q ~/my_pipelines/test_orders.py": (
        "tests/test_testing_driver.py::test_the_guides_test_of_its_pipeline_passes (in this process)"
    ),
    "airflow dags test orders": ("tests/test_user_pipelines.py::test_the_guide_pipeline_runs_under_airflow_dag_test"),
    "make setup": "CI: .ci/run runs `make setup` (and `make test` runs it first)",
    ".venv/bin/airflow dags test clicks_per_region": "tests/test_dags.py::test_make_demo (scripts/demo.sh runs it)",
    ".venv/bin/airflow standalone": "nothing: a server that runs until stopped; "
    "tests/test_stream_integration.py runs Airflow's api-server, scheduler and dag-processor instead",
    "cp docker/env.example .env": "nothing: a step before `docker compose up`; tests/test_deploy.py checks the file",
    "docker compose up -d --build": (
        "nothing: no Docker engine in CI; tests/test_deploy.py validates docker-compose.yaml"
    ),
    "make wheel": "tests/test_install.py builds the wheel as `make wheel` does (uv build)",
    "pip install dist/streamtable-0.1.0-py3-none-any.whl[airflow] -c constraints.txt": (
        "tests/test_install.py (uv pip install of the wheel built there, [airflow], -c constraints.txt)"
    ),
    "streamtable jars fetch --repository https://repo1.maven.org/maven2": (
        "tests/test_install.py and tests/test_jars.py (from a file:// Maven repository: no network in tests)"
    ),
    "airflow variables set streamtable_pipelines /srv/team/pipelines": (
        "tests/test_user_pipelines.py::test_the_variable_set_with_the_airflow_cli_makes_the_folders_dags"
    ),
    "airflow dags reserialize": (
        "tests/test_user_pipelines.py::test_the_variable_set_with_the_airflow_cli_makes_the_folders_dags"
    ),
    "airflow dags list": (
        "tests/test_user_pipelines.py::test_the_variable_set_with_the_airflow_cli_makes_the_folders_dags"
    ),
    "airflow connections add spark_default --conn-type spark --conn-host local[2]": (
        "scripts/setup.sh (make setup) adds this very connection, with a description, to the checkout's Airflow"
    ),
    "airflow connections add spark_default --conn-type spark --conn-host spark://spark-master --conn-port 7077": (
        "nothing: needs a Spark standalone master (scripts/setup.sh adds the local[2] connection the same way)"
    ),
    "scripts/spark-cluster.sh start": "tests/test_stream_integration.py",
    "make bench": "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)",
    ".venv/bin/python bench/batch_stages.py --batches 12": "nothing: a benchmark (docs/benchmarks.md has its figures)",
    ".venv/bin/python bench/batch_stages.py --batches 6 --driver-scenarios 5": (
        "nothing: a benchmark (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/batch_stages.py --batches 8 --driver-scenarios 0 --inventory-keys 1000000 10000000": (
        "nothing: a benchmark of minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/test_driver.py": "nothing: a benchmark (docs/benchmarks.md has its figures)",
    ".venv/bin/python bench/latency.py --rates 1000 10000 30000 100000 --seconds 60": (
        "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/table_input.py --rows 1000 1000000 --changes 1000 --batches 4": (
        "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/table_input_appends.py --rows 1000 200000 --changes 1000 --batches 4": (
        "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/merge_on_read.py --keys 1000000 10000000 --events 1000 --batches 5": (
        "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/dv_commit.py --keys 1000000 10000000 --events 1000 --batches 5": (
        "nothing: a benchmark prototype of minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/other_job_versions.py --versions 100 1000 5000 --rounds 3": (
        "nothing: a benchmark of many minutes (docs/benchmarks.md has its figures)"
    ),
    ".venv/bin/python bench/status_lag.py --versions 50 300 --delay-ms 20 --rounds 3": (
        "nothing: a benchmark of minutes (docs/benchmarks.md has its figures)"
    ),
}
# Exit codes other than 0 that a line run here must give.
EXIT_CODES = {
    # `start` is not run here (RUN_ELSEWHERE), and SPARK_CLUSTER_DIR is a fresh directory: the cluster is down.
    "scripts/spark-cluster.sh status": 3,
}
# Pages that go on where another page left its lake: page -> the page before it (run first, when it has not run).
CONTINUES = {DOCS / "reprocessing.md": README}
WORKDIRS: dict[Path, Path] = {}  # page -> the directory of the lake its blocks ran in

# Blocks run by a test of their own in this file: (page, section heading) -> the test.
RUN_BY_TESTS_HERE = {
    ("docs/pipelines.md", "Interactive queries"): "test_interactive_query_snippet_runs_and_prints_the_store",
    ("docs/sources.md", "Kafka topics"): "test_the_kafka_example_copies_a_topic_and_prints_the_page_s_line",
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    lang: str
    info: tuple[str, ...]  # the words of the fence's info string after the language
    section: str  # the heading the block is under
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUNNABLE and not self.excerpt_of and not self.user_file

    @property
    def user_file(self) -> str | None:
        """`~/PATH` of a block fenced with `title="~/PATH"`: a file the user writes."""
        m = next((re.fullmatch(r'title="(~/[\w./-]+)"', w) for w in self.info if w.startswith("title=")), None)
        return m.group(1) if m else None

    @property
    def excerpt_of(self) -> Path | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        m = re.fullmatch(r"# ([\w./-]+\.\w+)", first.strip()) if self.lang == "python" else None
        return ROOT / m.group(1) if m else None


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page; fails on an unclosed fence or an indented one."""
    found, section, fence = [], "", None
    lines = page.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if fence is None:
            if line.startswith("#"):
                section = line.lstrip("#").strip()
            assert not re.match(r"\s+(```|~~~)", line), f"{page.name}:{n}: indented fence: fence at column 0"
            if line.startswith("```"):
                words = line[3:].split()
                fence = (n, words[0] if words else "", tuple(words[1:]), [])
        elif line.rstrip() == "```":
            start, lang, info, body = fence
            found.append(Block(page, start, lang, info, section, "\n".join(body) + "\n"))
            fence = None
        else:
            fence[3].append(line)
    assert fence is None, f"{page.name}:{fence[0]}: unclosed fence"
    return found


def shell_lines(code: str) -> list[str]:
    """The command lines of a shell block: backslash continuations joined, blank and comment lines dropped."""
    joined = code.replace("\\\n", " ")
    return [line for line in joined.splitlines() if shlex.split(line, comments=True)]


def key(line: str) -> str:
    return " ".join(shlex.split(line, comments=True))


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


# ---------------------------------------------------------------------------------------------- structure


def test_every_block_is_fenced_with_a_language_and_every_runnable_line_is_accounted_for():
    used: set[str] = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        in_fence = False
        previous = ""
        for n, line in enumerate(text.splitlines(), 1):
            if line.startswith("```"):
                in_fence = not in_fence
            elif not in_fence and line.startswith("    ") and not previous.strip():
                pytest.fail(f"{page.name}:{n}: an indented code block: fence it with a language")
            previous = line
        for block in blocks(page):
            assert block.lang in RUNNABLE | ILLUSTRATIONS, (
                f"{block.where}: fence every block with a language: one of {sorted(RUNNABLE | ILLUSTRATIONS)}"
            )
            if block.lang == "python" or block.lang in ILLUSTRATIONS:
                continue
            used |= {key(line) for line in shell_lines(block.code) if key(line) in RUN_ELSEWHERE}
    stale = set(RUN_ELSEWHERE) - used
    assert not stale, f"RUN_ELSEWHERE names lines no page has any more: {sorted(stale)}"
    for line, where in RUN_ELSEWHERE.items():
        for path, test in re.findall(r"((?:tests|scripts)/[\w./-]+\.(?:py|sh)|\.ci/run)(?:::(\w+))?", where):
            assert (ROOT / path).is_file(), f"RUN_ELSEWHERE[{line!r}] names {path}, which does not exist"
            assert not test or f"def {test}(" in (ROOT / path).read_text(), f"{path} has no {test}"
    for (page, section), test in RUN_BY_TESTS_HERE.items():
        assert test in globals(), f"RUN_BY_TESTS_HERE names {test}, which is not a test of this file"
        assert any(b.page == ROOT / page and b.section == section and b.runnable for b in all_blocks()), (
            f"RUN_BY_TESTS_HERE: {page} has no runnable block under '{section}'"
        )


def test_excerpts_are_verbatim_in_their_files():
    excerpts = [b for b in all_blocks() if b.excerpt_of]
    assert excerpts, "the README shows a pipeline's process() as an excerpt"
    for block in excerpts:
        assert block.excerpt_of.is_file(), f"{block.where}: an excerpt of {block.excerpt_of}, which does not exist"
        source = block.excerpt_of.read_text(encoding="utf-8")
        body = block.code.split("\n", 1)[1]
        position = 0
        for chunk in re.split(r"^\s*\.\.\.\s*$\n?", body, flags=re.M):
            if not chunk.strip():
                continue
            found = source.find(chunk.strip("\n"), position)
            assert found >= 0, f"{block.where}: not verbatim in {block.excerpt_of.relative_to(ROOT)}:\n{chunk}"
            position = found + len(chunk.strip("\n"))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_resolve():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: link to {target}: no such file"
            if anchor and file.suffix == ".md":
                anchors = {slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)}
                assert anchor in anchors, f"{page.name}: link to {target}: no such heading in {file.name}"


def test_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first = blocks(README)[0]
    assert [key(line) for line in shell_lines(first.code)] == ["make demo", "make test"]
    assert "\n## Tests\n" in text
    first_screen = text[: text.index("\n## ")]  # what a newcomer sees first says where to go next
    for page in ("your-own-pipeline.md", "README.md", "design.md", "reprocessing.md", "running-continuously.md"):
        assert f"(docs/{page})" in first_screen, f"the README's first screen points to docs/{page}"
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name}" in text, f"the README links to every docs page: not to {page.name}"
    table = text[text.index("## Where things are") : text.index("## Documentation")]
    layers = sorted(p.name for p in (ROOT / "include" / "streamtable").iterdir() if (p / "__init__.py").is_file())
    for folder in ["dags/", "tests/", "bench/", "examples/", "scripts/", "docs/"] + [f"{n}/" for n in layers]:
        assert f"{folder}`" in table, f"the README's table of where things are names {folder}"
    # The example's table, as the README shows it, is the one `make demo` checks.
    [shown] = [b for b in blocks(README) if "output" in b.info]
    assert shown.code == (ROOT / "examples/clicks_per_region/expected_clicks_per_region.jsonl").read_text()


def test_the_command_table_lists_the_cli_commands():
    text = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[([\w-]+\.md)\]", text, re.M))
    assert listed == {p.name for p in DOCS.glob("*.md")} - {"README.md", "reference.md"}, "its table lists every page"
    documented = set(re.findall(r"^\| `streamtable ([\w-]+)", text, re.M))
    commands = set(cli.parser()._subparsers._group_actions[0].choices)
    assert documented == commands, "docs/README.md's table of commands lists exactly the CLI's commands"
    built_in = [p for p in (ROOT / "include/streamtable/pipelines").glob("*.py") if p.name != "__init__.py"]
    numbers = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
    ]
    for page in PAGES:
        for said in re.findall(r"\b(\w+) built-in pipelines|built-in (\w+)\b", page.read_text(encoding="utf-8")):
            word = next(w for w in said if w).lower()
            assert word not in numbers or numbers.index(word) == len(built_in), (
                f"{page.name}: {word} built-in pipelines"
            )
    named = set(re.findall(r"^## `(\w+)`", (DOCS / "pipelines.md").read_text(encoding="utf-8"), re.M))
    assert named and named <= set(pipelines()), "docs/pipelines.md describes registered pipelines only"


# ---------------------------------------------------------------------------------------------- words

# Words the code no longer means, outside the folders where it still does: word -> (folders it may appear in, why).
STALE_WORDS = {
    r"\bQualityGateOperator\b|\bquality_gate\b": (
        (),
        "a micro-batch's check is its run's per-batch gate (no quality_gate task); validate_PIPELINE runs the suites",
    ),
    r"(?i)\bflock": (
        ("include/streamtable/storage/",),
        "only storage/ takes a file lock (store.py's local compare-and-swap); every other lock is a lease, "
        "across hosts (docs/design.md#concurrency-leases)",
    ),
}
CODE = [p for p in sorted((ROOT / "include" / "streamtable").rglob("*.py"))] + sorted((ROOT / "dags").rglob("*.py"))
# Top folders a path in the docs may start with: a path starting elsewhere (LAKE/..., DIR/...) is a placeholder.
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} | {".ci", "streamtable"}
LAYERS = {p.name for p in (ROOT / "include" / "streamtable").iterdir() if (p / "__init__.py").is_file()}
TOP |= LAYERS
TOP -= {".venv", "build", "lake", "node_modules"}
WRITTEN_BY_RUNS = ("bench/results/",)  # files a command writes (git ignores them): the page names its command
WRITTEN_BY_CODE = {"replay.sh": "tests/campaign/runner.py"}  # a file named alone that code writes -> the code


def test_no_page_and_no_module_says_a_word_the_code_no_longer_means():
    for word, (allowed, why) in STALE_WORDS.items():
        for file in PAGES + CODE:
            where = str(file.relative_to(ROOT))
            if where.startswith(allowed):
                continue
            for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
                assert not re.search(word, line), f"{where}:{n}: says {word!r}, but {why}:\n{line}"


def named_paths(text: str) -> list[str]:
    """The repository paths a page names (`tests/test_x.py`, `runtime/batch/staging.py`, `.../cli/job.py`)."""
    found = re.findall(r"(?<![\w/.$<-])((?:\.\.\./)?(?:[\w.-]+/)+[\w.-]*\w)(?:::\w+)?", text)
    return [p.removeprefix(".../") for p in found if p.removeprefix(".../").split("/")[0] in TOP]


def test_every_path_and_module_a_page_names_exists():
    package = ROOT / "include" / "streamtable"
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in named_paths(text):
            if path.startswith(WRITTEN_BY_RUNS) or "*" in path:
                continue
            places = [ROOT / path, ROOT / "include" / path, package / path, page.parent / path]
            assert any(p.exists() for p in places), f"{page.name} names {path}, which does not exist"
        for name in re.findall(r"`(\w+\.(?:py|sh))`", text):  # a file named alone: the repository's, or the user's
            written = name in WRITTEN_BY_CODE and name in (ROOT / WRITTEN_BY_CODE[name]).read_text(encoding="utf-8")
            assert written or name in repository_files() | user_files(), f"{page.name} names {name}: no such file"
        for test_file, test in re.findall(r"(tests/[\w/]+\.py)::(\w+)", text):
            assert f"def {test}(" in (ROOT / test_file).read_text(), f"{page.name}: {test_file} has no {test}"
        layers = "|".join(sorted(LAYERS - {"airflow"}))  # `airflow.sdk` is Airflow's own
        relative = [f"streamtable.{n}" for n in re.findall(rf"`((?:{layers})(?:\.\w+)+)", text)]  # `runtime.spark`
        for name in re.findall(r"\bstreamtable(?:\.\w+)+", text) + relative:
            parts = name.split(".")
            if any(part.isupper() for part in parts):  # streamtable.TABLE: an Asset's name, TABLE a placeholder
                continue
            module = next(i for i in range(len(parts), 0, -1) if module_file(parts[:i]))
            rest = parts[module:]
            file = module_file(parts[:module])
            stub = file.with_suffix(".pyi")  # a package's lazily imported names (streamtable/__init__.pyi)
            source = file.read_text(encoding="utf-8") + (stub.read_text(encoding="utf-8") if stub.is_file() else "")
            defined = rf"^(?:\s*(?:def|class) {rest[0]}\b|{rest[0]}\s*[:=]|.*\bimport\b.*\b{rest[0]}\b)" if rest else ""
            assert not rest or re.search(defined, source, re.M), f"{page.name} names {name}: no such module or name"


@functools.cache
def tracked() -> tuple[str, ...]:
    """The paths git tracks."""
    return tuple(
        subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    )


def repository_files() -> set[str]:
    """The names of the files git tracks."""
    return {Path(path).name for path in tracked()}


def user_files() -> set[str]:
    """The names of the files the pages have the user write (```` title="~/PATH" ````)."""
    return {Path(b.user_file).name for b in all_blocks() if b.user_file}


@functools.cache
def code_text() -> str:
    """The text of the code git tracks (the package, scripts, DAGs, tests, the Makefile, CI, docker)."""
    places = ("include/", "scripts/", "dags/", "tests/", "bench/", "docker/", ".ci/", "Makefile", "pyproject.toml")
    files = [
        ROOT / f
        for f in tracked()
        if f.startswith(places) and f.endswith((".py", ".sh", ".toml", ".yaml", "Makefile", "run", "Dockerfile"))
    ]
    return "\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files if f.is_file())


def test_every_make_target_and_variable_a_page_names_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"`make (?:-s )?([a-z][\w-]*)", text):
            assert re.search(rf"^{target}:", makefile, re.M), f"{page.name} names `make {target}`: no such target"
        for variable in set(re.findall(r"\bSTREAMTABLE_[A-Z_]+\b", text)):
            assert variable in code_text(), f"{page.name} names {variable}, which no code reads"


# Names before a dot that are not the package's modules: Spark's conf keys and session (`spark.jars`), Airflow's
# modules and files (`airflow.sdk`, `airflow.cfg`), a generation's `query.json`; `streamtable.*` names have their test.
NOT_MODULES = {"spark", "airflow", "query", "streamtable"}


def test_every_module_attribute_a_page_names_is_defined_there():
    """`delta_rs.replace_rows`, `settings.JOB_SCRIPT`: the module of that name defines (or imports) the name."""
    modules: dict[str, list[Path]] = {}
    for file in (ROOT / "include" / "streamtable").rglob("*.py"):
        modules.setdefault(file.parent.name if file.name == "__init__.py" else file.stem, []).append(file)
    for page in PAGES:
        for module, name in re.findall(r"`(\w+)\.(\w+)[`(]", page.read_text(encoding="utf-8")):
            if module in NOT_MODULES or len(modules.get(module, [])) != 1:
                continue
            source = modules[module][0].read_text(encoding="utf-8")
            defined = rf"^\s*(?:def|class) {name}\b|^{name}\s*[:=]|^\s*(?:from|import) .*\b{name}\b|^\s+{name},?$"
            assert re.search(defined, source, re.M), f"{page.name} names {module}.{name}: {module} has no {name}"


def module_file(parts: list[str]) -> Path | None:
    base = ROOT / "include" / Path(*parts)
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def test_every_option_of_every_command_is_on_a_page():
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    parsers = [("", cli.parser())]
    while parsers:
        name, parser = parsers.pop()
        for action in parser._actions:
            for option in action.option_strings:
                assert option in {"-h", "--help", "--version"} or option in text, (
                    f"`streamtable{name} {option}` is on no page"
                )
            for sub, nested in (getattr(action, "choices", None) or {}).items() if action.nargs == "A..." else []:
                parsers.append((f"{name} {sub}", nested))


def test_every_streamtable_command_line_on_a_page_parses():
    """Each `streamtable ...` a page shows, in a block or in prose, names a command and options that exist."""
    commands = cli.parser()._subparsers._group_actions[0].choices
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        lines = re.findall(r"`(streamtable [^`\n]+)`", text)
        shell = [b for b in blocks(page) if b.lang in RUNNABLE - {"python"}]
        lines += [line for b in shell for line in shell_lines(b.code) if line.lstrip().startswith("streamtable ")]
        for line in lines:
            command_line = line.split(" | ")[0].split(" > ")[0]
            tokens = shlex.split(command_line, comments=True) if command_line.count('"') % 2 == 0 else line.split()
            if len(tokens) < 2 or tokens[1].startswith("-") or tokens[1].endswith(":"):  # `streamtable report:`, a log
                continue
            assert tokens[1] in commands, f"{page.name}: `{line}`: no command {tokens[1]!r}"
            command = commands[tokens[1]]
            options = {o for a in command._actions for o in a.option_strings}
            for action in command._actions:  # a command's own sub-commands (`jars fetch`)
                for name, nested in (getattr(action, "choices", None) or {}).items() if action.nargs == "A..." else []:
                    if name in tokens:
                        options |= {o for a in nested._actions for o in a.option_strings}
            unknown = [t for t in tokens[2:] if t.startswith("--") and t.split("=")[0] not in options]
            assert not unknown, f"{page.name}: `{line}`: `streamtable {tokens[1]}` has no option {unknown}"


# ---------------------------------------------------------------------------------------------- running


class ThreadStdout(io.TextIOBase):
    """sys.stdout that sends a thread's writes to its buffer while it has one (commands of two threads)."""

    def __init__(self, fallback):
        self.fallback = fallback
        self.buffers: dict[int, io.StringIO] = {}

    def write(self, s: str) -> int:
        return self.buffers.get(threading.get_ident(), self.fallback).write(s)

    def flush(self) -> None:
        self.fallback.flush()


class PageRunner:
    def __init__(self, page: Path, work: Path, monkeypatch):
        self.page, self.work = page, work
        self.lake = work / "lake"
        self.stdout = ThreadStdout(sys.stdout)
        monkeypatch.setattr(sys, "stdout", self.stdout)
        monkeypatch.setenv("STREAMTABLE_LAKE", str(self.lake))
        monkeypatch.setenv("HOME", str(work / "home"))
        monkeypatch.setenv(registry.ENV, "")  # `--pipelines` adds to it; the page's folders leave with the page
        monkeypatch.chdir(ROOT)
        self.env = {
            **os.environ,
            "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "STREAMTABLE_LAKE": str(self.lake),
            "SPARK_CLUSTER_DIR": str(work / "spark-cluster"),
            "HOME": str(work / "home"),
        }
        self.ran: list[str] = []

    def line(self, block: Block, line: str) -> str:
        """Run one command line; return what it printed."""
        tokens = shlex.split(line, comments=True)
        self.ran.append(key(line))
        if tokens[0] == "streamtable" and not set(tokens) & {"|", ">", "<", "&&", ";", "&"}:
            code, out = self.streamtable([os.path.expanduser(t) for t in tokens[1:]])  # as bash expands ~
            assert code == 0, f"{block.where}: `{key(line)}` exited {code}"
            return out
        proc = subprocess.run(["bash", "-c", line], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300)
        expected = EXIT_CODES.get(key(line), 0)
        assert proc.returncode == expected, (
            f"{block.where}: `{line}` exited {proc.returncode}, not {expected}:\n{proc.stdout}{proc.stderr}"
        )
        return proc.stdout

    def streamtable(self, argv: list[str]) -> tuple[int, str]:
        if "--lake" not in argv:
            argv = [*argv, "--lake", str(self.lake)]
        buffer = self.stdout.buffers[threading.get_ident()] = io.StringIO()
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse: --help, usage errors
            code = e.code
        finally:
            logging.disable(logging.NOTSET)  # main() disables logging without --debug
            del self.stdout.buffers[threading.get_ident()]
        return code, buffer.getvalue()

    def shell(self, block: Block) -> str:
        lines = [line for line in shell_lines(block.code) if key(line) not in RUN_ELSEWHERE]
        out = ""
        while lines:
            line = lines.pop(0)
            if shlex.split(line, comments=True)[-1] == "&":
                follow = []
                while lines and key(lines[0]) != "kill -TERM %1":
                    follow.append(lines.pop(0))
                assert lines, f"{block.where}: `{line}` in the background needs a `kill -TERM %1` after it"
                self.ran.append(key(lines.pop(0)))
                out = self.serve(block, line, follow)
            else:
                out = self.line(block, line)
        return out

    def serve(self, block: Block, line: str, follow: list[str]) -> str:
        """`streamtable serve P ... &`, the `follow` lines while it serves, then `kill -TERM %1`.

        `serve` installs its SIGTERM handler, so it runs in the main thread; a helper thread types the
        other lines once it serves, waits until its batches caught up with the input, and sends SIGTERM.
        """
        tokens = shlex.split(line, comments=True)[:-1]
        assert tokens[:2] == ["streamtable", "serve"], f"{block.where}: only `streamtable serve` runs in the background"
        self.ran.append(key(line))
        pipeline = tokens[2]
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        serving = lambda: signal.getsignal(signal.SIGTERM) is not handlers[signal.SIGTERM]  # noqa: E731
        finished = threading.Event()
        guard = threading.Lock()  # SIGTERM only while serve's handler is still installed
        errors: list[BaseException] = []

        def user() -> None:
            try:
                deadline = time.monotonic() + 300
                while not serving() and not finished.is_set() and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert serving(), f"{block.where}: `{key(line)}` did not start serving"
                for command in follow:
                    self.line(block, command)
                while time.monotonic() < deadline and not finished.is_set():
                    status = pipeline_status(Lake(self.lake), pipeline).as_dict()
                    if not status["behind"] and (status["last_batch"] or {}).get("mode") == "serve":
                        break
                    time.sleep(0.5)
                else:
                    raise AssertionError(f"{block.where}: `{key(line)}` did not catch up with its input in 300 s")
            except BaseException as e:
                errors.append(e)
            finally:
                with guard:
                    if serving() and not finished.is_set():
                        os.kill(os.getpid(), signal.SIGTERM)  # `kill -TERM %1`: serve finishes its batch, exits 0

        helper = threading.Thread(target=user, daemon=True)
        helper.start()
        try:
            code, out = self.streamtable(tokens[1:])
        finally:
            with guard:
                finished.set()
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
            helper.join(60)
        if errors:
            raise errors[0]
        assert code == 0, f"{block.where}: `{key(line)}` exited {code}"
        return out

    def python(self, block: Block) -> str:
        buffer = self.stdout.buffers[threading.get_ident()] = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.work)
        try:
            exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
        finally:
            os.chdir(cwd)
            del self.stdout.buffers[threading.get_ident()]
        return buffer.getvalue()


def needs_spark(page: Path) -> bool:
    commands = [
        shlex.split(line, comments=True)
        for b in blocks(page)
        if b.lang in RUNNABLE - {"python"}
        for line in shell_lines(b.code)
    ]
    return any(c[0] == "streamtable" and len(c) > 1 and c[1] in SPARK_COMMANDS for c in commands)


def json_values(text: str) -> list:
    """The JSON values of `text`, one after the other (JSON lines, or values folded over several lines)."""
    decoder, values, position = json.JSONDecoder(), [], 0
    while text[position:].strip():
        value, position = decoder.raw_decode(text, len(text) - len(text[position:].lstrip()))
        values.append(value)
    return values


def varied(value) -> str:
    """What a varying value must keep: a time's form (UTC, milliseconds, `Z`), else nothing but being there."""
    time = isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value)
    return "YYYY-MM-DDTHH:MM:SS.mmmZ" if time else "..."


def without(value, vary: set[str]):
    """`value` with the values of the keys in `vary` replaced by what they must keep (`varied`), at any depth."""
    if isinstance(value, dict):
        return {k: varied(v) if k in vary else without(v, vary) for k, v in value.items()}
    if isinstance(value, list):
        return [without(v, vary) for v in value]
    return value


def check_output(block: Block, ran: Block, printed: str) -> None:
    """An output block shows what `ran` printed: exactly (`text`), or as JSON but for its `vary=` keys."""
    if block.lang == "json":
        vary = {k for w in block.info if w.startswith("vary=") for k in w.removeprefix("vary=").split(",")}
        shown, got = without(json_values(block.code), vary), without(json_values(printed), vary)
        but = f" (but for {sorted(vary)})"
        assert got == shown, f"{block.where}: {ran.where} printed\n{printed}\nnot{but}\n{block.code}"
        return
    shown_text = block.code.rstrip("\n")
    assert printed.rstrip("\n") == shown_text, f"{block.where}: {ran.where} printed\n{printed}\nnot\n{block.code}"


def run_page(page: Path, work: Path, monkeypatch) -> PageRunner:
    """Run a page's runnable blocks in order in the lake `work/lake`; check its output blocks."""
    runner = PageRunner(page, work, monkeypatch)
    last: tuple[Block, str] | None = None
    for block in blocks(page):
        dedicated = (str(page.relative_to(ROOT)), block.section) in RUN_BY_TESTS_HERE
        if "output" in block.info and not dedicated:
            assert last, f"{block.where}: an output block follows no runnable block"
            check_output(block, *last)
            continue
        if block.user_file:
            path = Path(os.path.expanduser(block.user_file))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code)
            continue
        if not block.runnable or dedicated:
            continue
        out = runner.python(block) if block.lang == "python" else runner.shell(block)
        last = (block, out)
    if any(line.startswith("streamtable serve") for line in runner.ran):
        assert "serve" in {r["mode"] for r in rows(Lake(runner.lake), "stream_progress")}, "serve committed a batch"
    WORKDIRS[page] = work
    return runner


SLOW_PAGES = {DOCS / "reprocessing.md", DOCS / "your-own-pipeline.md"}  # many runs and a reprocess each


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p for p in PAGES],
    ids=[str(p.relative_to(ROOT)) for p in PAGES],
)
def test_the_page_runs(page: Path, tmp_path, monkeypatch, request):
    request.addfinalizer(registry.current.cache_clear)  # forget the pipelines the page's folders declared
    if needs_spark(page) or page in CONTINUES:
        request.getfixturevalue("spark")  # the session's SparkSession: in-process commands use it
    work = tmp_path
    if page in CONTINUES:  # the page goes on in the lake its predecessor left
        before = CONTINUES[page]
        work = WORKDIRS[before] if before in WORKDIRS else run_page(before, tmp_path / "before", monkeypatch).work
    run_page(page, work, monkeypatch)


# ---------------------------------------------------------------------------------------------- dedicated


def snippet(page: str, heading: str) -> str:
    """The python block of `page`'s section called `heading`."""
    found = [b for b in blocks(ROOT / page) if b.section == heading and b.lang == "python"]
    assert len(found) == 1, f"{page} has one python block under '{heading}'"
    return found[0].code


def test_interactive_query_snippet_runs_and_prints_the_store(tmp_path, monkeypatch, capsys):
    # The lake the snippet names ("lake", relative to where it runs) holds an `inventory` table as
    # `streamtable run inventory` publishes it: a Delta table of the pipeline's output schema.
    lake = Lake(tmp_path / "lake")
    spec = get_pipeline("inventory").output("inventory")
    stock = [
        {"store": "berlin", "item": "apples", "quantity": -1},
        {"store": "berlin", "item": "pears", "quantity": 3},
        {"store": "paris", "item": "apples", "quantity": 5},
    ]
    write_deltalake(lake.table_path("inventory"), pa.Table.from_pylist(stock, schema=arrow_schema(spec.columns)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STREAMTABLE_LAKE", raising=False)

    code = snippet("docs/pipelines.md", "Interactive queries")
    assert "from streamtable import query" in code and len(code.strip().splitlines()) <= 4
    exec(compile(code, "docs/pipelines.md", "exec"), {})
    [shown] = [b for b in blocks(DOCS / "pipelines.md") if b.section == "Interactive queries" and "output" in b.info]
    assert capsys.readouterr().out == shown.code


def test_the_kafka_example_copies_a_topic_and_prints_the_page_s_line(kafka_bootstrap, tmp_path, monkeypatch, capsys):
    # docs/sources.md's Kafka example against the shared broker (`make -s kafka`, which the fixture ran), on a
    # topic of its own: the page's topic `user_regions` renamed, as the broker keeps topics between sessions.
    section = [b for b in blocks(DOCS / "sources.md") if b.section == "Kafka topics"]
    python, console, output = (next(b for b in section if b.lang == lang) for lang in ("python", "console", "text"))
    topic = f"user_regions-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("STREAMTABLE_KAFKA", kafka_bootstrap)
    monkeypatch.chdir(ROOT)
    assert python.code.count('"user_regions"') == 2
    exec(compile(python.code.replace('"user_regions"', repr(topic)), python.where, "exec"), {})
    lines = shell_lines(console.code)
    assert key(lines[0]) == key('eval "$(make -s kafka)"')
    printed = []
    for line in lines[1:]:
        tokens = shlex.split(line)
        tokens[tokens.index("--kafka") + 1] = topic
        assert tokens[0] == "streamtable"
        try:
            assert cli.main([*tokens[1:], "--lake", str(tmp_path / "lake")]) == 0
        finally:
            logging.disable(logging.NOTSET)
        printed.append(capsys.readouterr().out)
    assert printed[-1].rstrip("\n") == output.code.rstrip("\n")
    regions = [r["region"] for r in rows(Lake(tmp_path / "lake"), "user_regions") if r["user"] == "bob"]
    assert regions == ["americas", None], "the tombstone deleted bob's region"


def in_process(*argv: str) -> int:
    """`streamtable ARGV...` in this process, with a lake given (commands that start no Spark)."""
    try:
        return cli.main(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        logging.disable(logging.NOTSET)  # main() disables logging without --debug


def page_block(page: str, section: str, lang: str, containing: str = "") -> Block:
    found = [b for b in blocks(ROOT / page) if b.section == section and b.lang == lang and containing in b.code]
    assert len(found) == 1, f"{page} has one {lang} block with {containing!r} under '{section}'"
    return found[0]


def test_a_broken_file_prints_the_line_the_guide_shows(tmp_path, capsys, request, monkeypatch):
    # your-own-pipeline.md's "When a file is wrong": the guide's orders.py with the typo it names.
    request.addfinalizer(registry.current.cache_clear)
    monkeypatch.setenv(registry.ENV, "")  # `--pipelines` adds to it: the folder leaves with the test
    guide = next(b for b in blocks(DOCS / "your-own-pipeline.md") if b.user_file == "~/my_pipelines/orders.py")
    shown = page_block("docs/your-own-pipeline.md", "When a file is wrong", "text", "unknown input")
    folder = tmp_path / "my_pipelines"
    folder.mkdir()
    assert guide.code.count('streams=("orders",)') == 1
    (folder / "orders.py").write_text(guide.code.replace('streams=("orders",)', 'streams=("order",)'))
    assert in_process("pipelines", "--pipelines", str(folder), "--lake", str(tmp_path / "lake")) == 5
    ours = [line for line in capsys.readouterr().err.splitlines() if line.startswith("streamtable:")]
    assert ours == [shown.code.strip().replace("/home/me/my_pipelines", str(folder))]


def test_a_record_of_every_type_shows_as_the_guide_says(tmp_path, capsys, request, monkeypatch):
    # your-own-pipeline.md's "Types": its changelog in a folder, its record ingested, `show` prints the page's row.
    request.addfinalizer(registry.current.cache_clear)
    monkeypatch.setenv(registry.ENV, "")
    declared = page_block("docs/your-own-pipeline.md", "Types", "python", "PAYMENTS = changelog(")
    [record] = json_values(page_block("docs/your-own-pipeline.md", "Types", "json").code)
    shown = page_block("docs/your-own-pipeline.md", "Types", "text")
    folder, lake = tmp_path / "payments", str(tmp_path / "lake")
    folder.mkdir()
    (folder / "payments.py").write_text(declared.code)
    (tmp_path / "payments.jsonl").write_text(json.dumps(record) + "\n")
    assert (
        in_process("ingest", "payments", str(tmp_path / "payments.jsonl"), "--pipelines", str(folder), "--lake", lake)
        == 0
    )
    capsys.readouterr()
    assert in_process("show", "payments", "--pipelines", str(folder), "--lake", lake) == 0
    assert capsys.readouterr().out == shown.code


def test_a_damaged_log_entry_fails_with_the_line_faults_md_shows(tmp_path, capsys):
    # faults.md's "A table that cannot be read", its local example: the log entry of version 1 cut short.
    shown = page_block("docs/faults.md", "What is guaranteed", "text", "cannot read").code.splitlines()
    [local] = [line for line in shown if "/srv/lake" in line]
    lake = Lake(tmp_path / "srv" / "lake")
    path = lake.table_path("user_clicks")
    write_deltalake(path, pa.table({"user": ["ann"]}))
    write_deltalake(path, pa.table({"user": ["bo"]}), mode="append")
    Path(path, "_delta_log", f"{1:020d}.json").write_text('{"commitInfo": {"timestamp":')
    assert in_process("show", "user_clicks", "--lake", str(lake.root)) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.strip() == local.replace("/srv/lake", str(lake.root))


def test_the_object_store_exports_what_operations_md_shows(object_store_env):
    # operations.md's "Local object store": the lines `make -s object-store` prints, as the shared server's env.
    shown = page_block("docs/operations.md", "Local object store", "text", "export AWS_ENDPOINT_URL").code
    exported = dict(line.removeprefix("export ").split("=", 1) for line in shown.splitlines())
    assert exported == object_store_env
