"""scripts/setup.sh's class-archive step, its functions run on their own (a real `make setup` takes minutes): the
recorded archive is kept in the machine's cache whether that cache folder is missing, empty or full, under the
script's `set -euo pipefail` (a fresh machine's first setup used to fail there, on the empty folder, after recording
it), and setup counts as up to date only while the archive is there, so the next setup records a missing one."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from helpers import ROOT

SETUP = ROOT / "scripts" / "setup.sh"


def setup_functions() -> str:
    """The class archive's settings and functions of setup.sh, from `# Step 3b` to the end of `cache_class_archive`."""
    lines = SETUP.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Step 3b"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start : end + 1])


def bash(script: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`script` after setup.sh's shell options and class-archive functions, with HOME (and its cache) in `home`."""
    environ = {"PATH": os.environ["PATH"], "HOME": str(home), "STREAMTABLE_JARS": str(home / "jars"), **(env or {})}
    code = f"set -euo pipefail\n{setup_functions()}\n{script}\n"
    return subprocess.run(["bash", "-c", code], env=environ, capture_output=True, text=True, timeout=60)


def test_the_recorded_archive_is_cached_in_a_missing_an_empty_or_a_full_cache_folder(tmp_path):
    archive = tmp_path / "jars" / "spark-classes.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"classes")
    cache = tmp_path / ".cache" / "streamtable" / "class-archives"

    missing = bash(f'cache_class_archive "{archive}" "{cache}/spark-classes-a.jsa"; echo cached', tmp_path)
    assert (missing.returncode, missing.stdout) == (0, "cached\n"), missing.stderr
    assert (cache / "spark-classes-a.jsa").read_bytes() == b"classes"

    (cache / "spark-classes-a.jsa").unlink()  # the folder is there, empty: a fresh machine's first setup
    empty = bash(f'cache_class_archive "{archive}" "{cache}/spark-classes-b.jsa"; echo cached', tmp_path)
    assert (empty.returncode, empty.stdout) == (0, "cached\n"), empty.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["spark-classes-b.jsa"]

    for age, name in enumerate(["c", "d", "e"]):  # b the oldest, then c, d, e the newest
        (cache / f"spark-classes-{name}.jsa").write_bytes(name.encode())
        os.utime(cache / f"spark-classes-{name}.jsa", (time.time() + age + 1,) * 2)
    full = bash(f'cache_class_archive "{archive}" "{cache}/spark-classes-f.jsa"', tmp_path)
    assert full.returncode == 0, full.stderr
    # the two most recently used kept beside the new one
    assert sorted(p.name for p in cache.iterdir()) == [
        "spark-classes-d.jsa",
        "spark-classes-e.jsa",
        "spark-classes-f.jsa",
    ]

    (cache / "spark-classes-f.jsa").unlink()
    unwritable = bash(f'cache_class_archive "{tmp_path / "nothing.jsa"}" "{cache}/spark-classes-f.jsa"', tmp_path)
    assert unwritable.returncode != 0 and not (cache / "spark-classes-f.jsa").exists()


def test_setup_is_up_to_date_only_while_the_class_archive_is_there(tmp_path):
    present = "class_archive_present && echo yes || echo no"
    assert bash(present, tmp_path).stdout == "no\n"  # not recorded (or its recording failed): the next setup records it
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "spark-classes.jsa").write_bytes(b"classes")
    assert bash(present, tmp_path).stdout == "yes\n"
    elsewhere = {"STREAMTABLE_CLASS_ARCHIVE": str(tmp_path / "other.jsa")}
    assert bash(present, tmp_path, elsewhere).stdout == "no\n"
    assert bash(present, tmp_path, {"STREAMTABLE_CLASS_ARCHIVE": ""}).stdout == "yes\n"  # turned off: nothing to record
    text = SETUP.read_text()
    assert "web_assets_present && class_archive_present; then" in text  # part of the up-to-date check
