"""`streamtable jars fetch`: the pinned jars from a Maven repository (here a file:// one laid out like Maven Central,
made of this checkout's jars/), checksums checked, nothing re-downloaded; the pins match what `make setup` fetched."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest

from helpers import CLI, ROOT
from streamtable.cli.jars import artifact_url, fetch
from streamtable.core.errors import SetupError
from streamtable.runtime import spark_settings as settings

JARS = ROOT / "jars"


def maven_repository(root, groups=("delta",), sha1=True):
    """A Maven repository layout (GROUP/ARTIFACT/VERSION/ARTIFACT-VERSION.jar[.sha1]) of the checkout's jars."""
    for name in groups:
        source = JARS if name == "delta" else JARS / name
        for group, artifact, version in settings.JARS[name]:
            folder = root.joinpath(*group.split("."), artifact, version)
            folder.mkdir(parents=True, exist_ok=True)
            jar = source / f"{artifact}-{version}.jar"
            os.symlink(jar, folder / jar.name)
            if sha1:
                (folder / f"{jar.name}.sha1").write_text(hashlib.sha1(jar.read_bytes()).hexdigest() + "\n")
    return root


def test_the_pinned_delta_jars_are_the_ones_setup_fetched():
    pom = (JARS / "pom.xml").read_text()
    assert re.search(r"<artifactId>delta-spark_4\.1_2\.13</artifactId>\s*<version>([^<]+)<", pom)[1] == (
        settings.DELTA_VERSION
    )
    fetched = {p.name for p in JARS.glob("*.jar")}
    assert fetched == {f"{a}-{v}.jar" for _, a, v in settings.JARS["delta"]}


def test_urls_follow_the_maven_layout(tmp_path):
    assert artifact_url("https://repo.example/maven2/", "io.delta", "delta-storage", "4.4.0") == (
        "https://repo.example/maven2/io/delta/delta-storage/4.4.0/delta-storage-4.4.0.jar"
    )
    assert artifact_url(str(tmp_path), "a.b", "c", "1").startswith(tmp_path.as_uri() + "/a/b/c/1/")


def test_jars_fetch_command(tmp_path):
    repo = maven_repository(tmp_path / "repo")
    dest = tmp_path / "jars"
    command = [CLI, "jars", "fetch", "--repository", repo.as_uri(), "--dest", str(dest)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    expected = sorted(f"{a}-{v}.jar" for _, a, v in settings.JARS["delta"])
    assert sorted(os.path.basename(p) for p in report["fetched"]) == expected and report["present"] == []
    assert sorted(p.name for p in dest.iterdir()) == expected  # no .partial left
    for name in expected:
        assert (dest / name).read_bytes() == (JARS / name).read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and json.loads(again.stdout)["fetched"] == []  # kept, not downloaded again
    # what a job then gets: the jars of $STREAMTABLE_JARS
    assert settings.has_delta([str(p) for p in dest.iterdir()])


def test_a_missing_artifact_or_a_wrong_checksum_is_refused(tmp_path):
    repo = maven_repository(tmp_path / "repo")
    with pytest.raises(SetupError, match="cannot download org.apache.hadoop:hadoop-aws"):
        fetch(repo.as_uri(), tmp_path / "jars", ("delta", "s3a"))
    group, artifact, version = settings.JARS["delta"][0]
    sha1 = repo.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.jar.sha1")
    sha1.write_text("0" * 40)
    with pytest.raises(SetupError, match="SHA-1"):
        fetch(repo.as_uri(), tmp_path / "other", ("delta",))
    assert not (tmp_path / "other" / f"{artifact}-{version}.jar").exists()


@pytest.mark.skipif(not (JARS / "s3a").is_dir(), reason="no s3a jars")
def test_with_s3a_goes_into_its_own_folder(tmp_path, monkeypatch):
    small = [a for a in settings.JARS["s3a"] if a[1] != "bundle"]  # not the AWS SDK's 640 MB
    monkeypatch.setitem(settings.JARS, "s3a", small)
    if not all((JARS / "s3a" / f"{a}-{v}.jar").is_file() for _, a, v in small):
        pytest.skip("set-up fetched no s3a jars (STREAMTABLE_SETUP_OBJECT_STORE=0)")
    repo = maven_repository(tmp_path / "repo", ("delta", "s3a"), sha1=False)  # no .sha1: nothing to check against
    report = fetch(str(repo), tmp_path / "jars", ("delta", "s3a"))
    assert {os.path.basename(p) for p in report["fetched"] if "/s3a/" in p} == {
        f"{a}-{v}.jar" for _, a, v in settings.JARS["s3a"]
    }
