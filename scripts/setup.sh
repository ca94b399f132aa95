#!/usr/bin/env bash
# `make setup`: everything streamtable needs on this machine, inside the project directory.
#
#   1. checks Java >= 17 and python3.11 (says what is missing; installs nothing system-wide itself,
#      except Maven when it is root and Maven is missing);
#   2. .venv with requirements.txt (the editable package with every extra) under the constraints.txt lock, and
#      the Data Docs pages' CSS, scripts and fonts from npm (scripts/fetch_web_assets.py);
#   3. Delta's jars in jars/ (mvn, from jars/pom.xml) when they are missing, and the class archive Spark's
#      drivers start from (jars/spark-classes.jsa, include/streamtable/deploy/class_archive.py);
#   4. an Airflow home in airflow_home/ (SQLite, `airflow db migrate`) with the spark_default connection (no
#      pools: a pipeline's runs, reprocesses and resets take turns on its lock in the lake);
#   5. optional, never fails setup: PostgreSQL for the integration test's Airflow (scripts/postgres.sh
#      start: installed with apt-get when root, started, role/db `airflow`). Without root or apt it only
#      says that the integration test needs PostgreSQL. STREAMTABLE_SETUP_POSTGRES=0 skips it.
#
# Idempotent. A stamp (.venv/.streamtable-setup) records a hash of the inputs of steps 2-4, written when they all
# succeeded (the class archive included): when nothing changed and their results are there, a second run only
# re-checks the tools (and that PostgreSQL runs) and exits in about a second; otherwise it redoes what is missing.
# Environment (the Makefile exports it; defaults here let the script run on its own):
#   AIRFLOW_HOME, STREAMTABLE_PYTHON (the interpreter for .venv, default python3.11), SETUP_FORCE=1.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$ROOT/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export STREAMTABLE_JARS="${STREAMTABLE_JARS:-$ROOT/jars}"  # where the class archive goes (runtime/spark_settings.py)
PYTHON="${STREAMTABLE_PYTHON:-python3.11}"
VENV="$ROOT/.venv"
STAMP="$VENV/.streamtable-setup"
UV_VERSION=0.13.9  # the installer of step 2
started=$(date +%s)

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

# Step 3b: the drivers' class archive (runtime/spark_settings.py's default place; STREAMTABLE_CLASS_ARCHIVE= turns it off).
CLASS_ARCHIVE="${STREAMTABLE_CLASS_ARCHIVE-$STREAMTABLE_JARS/spark-classes.jsa}"
class_archive_present() { [[ -z "$CLASS_ARCHIVE" || -f "$CLASS_ARCHIVE" ]]; }
# Keep a copy of the archive ARCHIVE as CACHED, in a cache folder that may not exist yet or be empty, beside the two
# most recently used others (each is ~190 MB; clones at other paths have keys of their own).
cache_class_archive() {
  local archive="$1" cached="$2" stale=()
  mkdir -p "$(dirname "$cached")" || return
  mapfile -t stale < <(ls -1t "$(dirname "$cached")"/spark-classes-*.jsa 2>/dev/null | tail -n +3)
  (( ${#stale[@]} == 0 )) || rm -f -- "${stale[@]}"
  cp "$archive" "$cached.partial" && mv "$cached.partial" "$cached"
}

# Step 5 (optional): PostgreSQL for the integration test. Never fails setup.
postgres() {
  [[ "${STREAMTABLE_SETUP_POSTGRES:-1}" != 0 ]] || return 0
  local out status=0
  out="$(bash "$ROOT/scripts/postgres.sh" start 2>&1)" || status=$?
  case "$status" in
    0) say "PostgreSQL for the integration test: ${out##*$'\n'}" ;;
    3) say "note: the integration test (tests/test_stream_integration.py) needs PostgreSQL and will be skipped: ${out##*$'\n'}" ;;
    *) say "warning: could not set up PostgreSQL for the integration test (it will be skipped):"; printf '%s\n' "$out" | tail -5 >&2 ;;
  esac
}

# ---------------------------------------------------------------- 1. tools
missing=()
java_bin=""
if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  java_bin="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
  java_bin="$(command -v java)"
fi
if [[ -z "$java_bin" ]]; then
  missing+=("Java 17 or newer (no java on PATH nor in \$JAVA_HOME): on Debian, apt-get install openjdk-17-jre-headless")
else
  java_version="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -1)"
  java_major="${java_version%%.*}"
  [[ "$java_major" == 1 ]] && java_major="$(echo "$java_version" | cut -d. -f2)"  # 1.8.0 -> 8
  if ! [[ "$java_major" =~ ^[0-9]+$ ]] || (( java_major < 17 )); then
    missing+=("Java 17 or newer ($java_bin is version '${java_version:-unknown}'): on Debian, apt-get install openjdk-17-jre-headless, or point JAVA_HOME at a JDK 17+")
  fi
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  missing+=("$PYTHON (Python 3.11, the version the lock was made for): on Debian 12, apt-get install python3.11 python3.11-venv; or set STREAMTABLE_PYTHON to a Python 3.11 interpreter")
elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  missing+=("Python 3.11: '$PYTHON' is $("$PYTHON" -V 2>&1)")
fi
if (( ${#missing[@]} )); then
  for m in "${missing[@]}"; do printf 'setup: MISSING: %s\n' "$m" >&2; done
  exit 1
fi

# ---------------------------------------------------------------- up to date?
delta_version="$(sed -n '/<artifactId>delta-spark/{n;s/.*<version>\(.*\)<\/version>.*/\1/p}' jars/pom.xml)"
[[ -n "$delta_version" ]] || die "cannot read Delta's version from jars/pom.xml"
inputs_hash="$( (cat requirements.txt constraints.txt pyproject.toml jars/pom.xml scripts/setup.sh; ls include/streamtable/pipelines) \
  | sha256sum | cut -d' ' -f1) $AIRFLOW_HOME"
jars_present() { compgen -G "jars/delta-spark_*-${delta_version}.jar" >/dev/null && compgen -G "jars/delta-storage-${delta_version}.jar" >/dev/null; }
kafka_version="$(sed -n '/<artifactId>kafka_2.13/{n;s/.*<version>\(.*\)<\/version>.*/\1/p}' jars/kafka/pom.xml)"  # step 3c
kafka_jars_present() { [[ -f "jars/kafka/kafka_2.13-${kafka_version}.jar" ]]; }
MACHINE_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/streamtable"  # what is built or recorded once per machine
WHEELHOUSE="$MACHINE_CACHE/wheels"  # step 2
# step 3d: the object store's server (built once per machine into a cache) and Spark's s3a jars
VERSITYGW_VERSION=v1.8.0
VERSITYGW_CACHE="$MACHINE_CACHE/bin/versitygw-$VERSITYGW_VERSION"
hadoop_aws_version="$(sed -n '/<artifactId>hadoop-aws/{n;s/.*<version>\(.*\)<\/version>.*/\1/p}' jars/s3a/pom.xml)"
object_store_present() {
  [[ "${STREAMTABLE_SETUP_OBJECT_STORE:-1}" == 0 ]] && return 0
  [[ -x build/bin/versitygw && -f "jars/s3a/hadoop-aws-${hadoop_aws_version}.jar" ]] && compgen -G "jars/s3a/bundle-*.jar" >/dev/null
}
web_assets_present() { [[ -f include/streamtable/airflow/data_docs_assets/jquery@3.7.1/dist/jquery.min.js ]]; }  # step 2b
if [[ "${SETUP_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$inputs_hash" \
      && -x "$VENV/bin/streamtable" && -f "$AIRFLOW_HOME/airflow.db" ]] && jars_present && kafka_jars_present && object_store_present \
      && web_assets_present && class_archive_present; then
  say "up to date (java $java_version, $("$VENV/bin/python" -V), Delta $delta_version jars, AIRFLOW_HOME=$AIRFLOW_HOME); SETUP_FORCE=1 to redo"
  postgres
  exit 0
fi
rm -f "$STAMP"

# Step 3d's build of the object store's server starts now, beside steps 2 to 3c, which wait on downloads on a fresh
# machine; step 3d waits for it. Measured with Go's caches empty and the rest cached (the downloads' wait is gone
# there): a setup of a fresh clone 196 -> 184 s.
versitygw_pid=""
if [[ "${STREAMTABLE_SETUP_OBJECT_STORE:-1}" != 0 && ! -x "$VERSITYGW_CACHE" ]]; then
  go="$(command -v go || echo /usr/local/go/bin/go)"
  [[ -x "$go" ]] || die "Go (>= 1.25) is needed once per machine, to build the local S3 server (versitygw) into $(dirname "$VERSITYGW_CACHE"): install it, or STREAMTABLE_SETUP_OBJECT_STORE=0 to skip"
  say "building versitygw $VERSITYGW_VERSION with Go into $(dirname "$VERSITYGW_CACHE") (once per machine, about 2 min), beside steps 2 to 3c"
  mkdir -p "$(dirname "$VERSITYGW_CACHE")"
  go_log="$(mktemp)"
  (  # one build at a time on this machine (setups of several clones); the binary appears whole or not at all
    flock 9
    [[ -x "$VERSITYGW_CACHE" ]] && exit 0
    gobin="$(mktemp -d "$(dirname "$VERSITYGW_CACHE")/.build.XXXXXX")"
    trap 'rm -rf "$gobin"' EXIT
    GOBIN="$gobin" "$go" install -trimpath -ldflags "-X=main.Version=$VERSITYGW_VERSION" \
      "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" && mv "$gobin/versitygw" "$VERSITYGW_CACHE"
  ) 9>"$(dirname "$VERSITYGW_CACHE")/.build.lock" >"$go_log" 2>&1 &
  versitygw_pid=$!
fi

# ---------------------------------------------------------------- 2. .venv
if [[ -x "$VENV/bin/python" ]] && ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  say ".venv is not Python 3.11: recreating it"
  rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating .venv with $("$PYTHON" -V)"
  "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv' failed: on Debian, apt-get install python3.11-venv"
fi
say "installing requirements.txt under the constraints.txt lock with uv (a few minutes on a fresh machine)"
# uv installs the same lock as pip would, in parallel and from its cache: 50 s instead of pip's 108 s here.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
# pyspark and pyspark-client are published as source distributions only. This machine's index serves them without
# the headers that let uv keep a download, so every fresh clone's setup fetched pyspark's 434 MB source again and
# built it into a new 1.4 GB entry of uv's cache (15 s, and the disk full after a few days of CI). Their wheels are
# built once per machine into $WHEELHOUSE, and installed from there.
for dist in pyspark pyspark-client; do
  version="$(sed -n "s/^$dist==//p" constraints.txt)"
  if ! compgen -G "$WHEELHOUSE/${dist//-/_}-$version-*.whl" >/dev/null; then
    say "building $dist $version's wheel once into $WHEELHOUSE (it is published as a source distribution only)"
    "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WHEELHOUSE" "$dist==$version" \
      || die "could not build $dist $version's wheel into $WHEELHOUSE"
  fi
done
"$VENV/bin/python" -m uv pip install -q --compile-bytecode --python "$VENV/bin/python" --find-links "$WHEELHOUSE" \
  -r requirements.txt -c constraints.txt
# setuptools leaves the package's metadata in include/streamtable.egg-info, which is on the import path beside the
# installed metadata: Airflow would load the Data Docs plugin's entry point twice and show "Plugin Import Error".
rm -rf include/streamtable.egg-info
"$VENV/bin/python" -m pip check >/dev/null || say "warning: 'pip check' reports conflicts (see .venv/bin/pip check)"

# ---------------------------------------------------------------- 2b. the Data Docs pages' CDN assets
# The CSS, scripts and fonts GX's Data Docs load from CDNs, from their npm tarballs (pinned integrity), so the Data
# Docs plugin serves pages that work without the internet (include/streamtable/airflow/web_assets.py). Seconds.
"$VENV/bin/python" scripts/fetch_web_assets.py \
  || die "could not fetch the Data Docs assets from registry.npmjs.org (scripts/fetch_web_assets.py)"

# ---------------------------------------------------------------- 3. Delta jars
if jars_present; then
  say "Delta $delta_version jars already in jars/"
else
  if ! command -v mvn >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      say "Maven is missing: installing it with apt-get"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >/dev/null
    else
      die "Maven (mvn) is needed once, to fetch Delta's jars into jars/: install it (Debian: sudo apt-get install maven) and run make setup again"
    fi
  fi
  say "fetching Delta $delta_version jars into jars/ with Maven"
  rm -f jars/delta-*.jar
  mvn_log="$(mktemp)"
  (cd jars && mvn -q -B dependency:copy-dependencies -DoutputDirectory=. -DincludeScope=runtime -DincludeGroupIds=io.delta) \
    >"$mvn_log" 2>&1 || { cat "$mvn_log" >&2; die "mvn could not fetch Delta's jars (see jars/pom.xml)"; }
  rm -f "$mvn_log"
  jars_present || die "mvn ran but jars/ has no delta-spark/delta-storage $delta_version jar"
fi

# The venv's own jar folder (runtime/spark_settings.py's default when $STREAMTABLE_JARS is unset) is the checkout's jars/,
# so .venv/bin/streamtable finds them without `make env`, as an installed package finds what `jars fetch` put there.
mkdir -p "$VENV/share/streamtable"
ln -sfn "$ROOT/jars" "$VENV/share/streamtable/jars"

# ---------------------------------------------------------------- 3b. the drivers' class archive
# Every driver JVM maps the classes of Spark and Delta from jars/spark-classes.jsa (include/streamtable/deploy/class_archive.py):
# a cold `streamtable run` starts about 7 s sooner. Recorded in the background while step 4 runs; without it
# everything works, only slower, so a failure here is a warning (and no stamp: the next setup tries again).
# The archive is only valid for this JDK and this class path, the size and modification time of each jar on it
# included (Spark's own, in the venv: the JVM checks them and ignores the whole archive on a mismatch), so a copy is
# kept in $CLASS_ARCHIVE_CACHE under a key of those: a fresh clone at the same path (CI's) takes it instead of spending
# a minute of both cores recording it again. A fresh clone's venv links pyspark's files from uv's cache, so their
# times stay the same as long as uv's unpacked wheel does (the wheelhouse of step 2). The jars of jars/ (Delta's,
# loaded by Spark's class loader, never from the archive) count by name and size. The classes streamtable's code
# loads can change between commits without a new key: an archive that lacks some of them is only slower for those.
archive_key="$( { "$java_bin" -version 2>&1; echo "$ROOT"; "$VENV/bin/python" -c 'import pyspark; print(pyspark.__version__)';
  stat -L -c '%s %Y %n' "$VENV"/lib/python3.11/site-packages/pyspark/jars/*.jar; stat -L -c '%s %n' jars/*.jar;
  cat include/streamtable/deploy/class_archive.py; } | sha256sum | cut -c1-16)"
CLASS_ARCHIVE_CACHE="$MACHINE_CACHE/class-archives"
cached_archive="$CLASS_ARCHIVE_CACHE/spark-classes-$archive_key.jsa"
archive_log="$(mktemp)"
archive_pid=""
if [[ -z "$CLASS_ARCHIVE" ]]; then
  say "STREAMTABLE_CLASS_ARCHIVE is empty: no class archive"
elif [[ -f "$cached_archive" ]]; then
  say "class archive for this JDK and class path from $CLASS_ARCHIVE_CACHE ($CLASS_ARCHIVE)"
  touch "$cached_archive"  # the cache keeps the most recently used: a clone set up every day keeps its archive
  rm -f "$CLASS_ARCHIVE"
  ln "$cached_archive" "$CLASS_ARCHIVE" 2>/dev/null || cp "$cached_archive" "$CLASS_ARCHIVE"
else
  say "recording the classes a Spark driver loads ($CLASS_ARCHIVE, python -m streamtable.deploy.class_archive), beside step 4"
  (  # exit 1: not recorded; 2: recorded, not cached
    "$VENV/bin/python" -m streamtable.deploy.class_archive || exit 1
    cache_class_archive "$CLASS_ARCHIVE" "$cached_archive" || exit 2
  ) >"$archive_log" 2>&1 &
  archive_pid=$!
fi

# ---------------------------------------------------------------- 3c. Kafka jars
# Apache Kafka's broker for `make kafka` (scripts/kafka.sh) and the tests: jars/kafka/ (mvn, from jars/kafka/pom.xml,
# ~43 MB), when the kafka_2.13 jar of the pom's version is missing.
if ! kafka_jars_present; then
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed once, to fetch Kafka's jars into jars/kafka/: install it (Debian: sudo apt-get install maven)"
  say "fetching Kafka $kafka_version jars into jars/kafka/ with Maven"
  rm -f jars/kafka/*.jar
  mvn_log="$(mktemp)"
  (cd jars/kafka && mvn -q -B dependency:copy-dependencies -DoutputDirectory=. -DincludeScope=runtime) >"$mvn_log" 2>&1 \
    || { cat "$mvn_log" >&2; die "mvn could not fetch Kafka's jars (see jars/kafka/pom.xml)"; }
  rm -f "$mvn_log"
  kafka_jars_present || die "mvn ran but jars/kafka/ has no kafka_2.13-$kafka_version.jar"
fi

# ---------------------------------------------------------------- 3d. object store: server and s3a jars
# `make object-store` (scripts/object-store.sh) and the tests: versitygw, an S3-compatible server with conditional
# writes, built with Go once per machine into $VERSITYGW_CACHE (fresh clones reuse it; ~1m45s on 2 cores, 80 MB)
# and linked to build/bin/versitygw; Spark's s3a connector in jars/s3a/ (from jars/s3a/pom.xml, hard links into
# ~/.m2: the AWS SDK bundle is 640 MB). STREAMTABLE_SETUP_OBJECT_STORE=0 skips both.
if [[ "${STREAMTABLE_SETUP_OBJECT_STORE:-1}" != 0 ]] && ! object_store_present; then
  if [[ -n "$versitygw_pid" ]]; then
    wait "$versitygw_pid" \
      || { tail -30 "$go_log" >&2; die "go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION failed (above)"; }
    rm -f "$go_log"
  fi
  mkdir -p build/bin
  ln -sfn "$VERSITYGW_CACHE" build/bin/versitygw
  if ! [[ -f "jars/s3a/hadoop-aws-${hadoop_aws_version}.jar" ]] || ! compgen -G "jars/s3a/bundle-*.jar" >/dev/null; then
    command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed once, to fetch the s3a jars into jars/s3a/: install it (Debian: sudo apt-get install maven)"
    say "fetching hadoop-aws $hadoop_aws_version and the AWS SDK bundle into jars/s3a/ with Maven (640 MB once into ~/.m2)"
    rm -f jars/s3a/*.jar jars/s3a/classpath.txt
    mvn_log="$(mktemp)"
    (cd jars/s3a && mvn -q -B dependency:build-classpath -DincludeScope=runtime -Dmdep.outputFile=classpath.txt) >"$mvn_log" 2>&1 \
      || { cat "$mvn_log" >&2; die "mvn could not fetch the s3a jars (see jars/s3a/pom.xml)"; }
    rm -f "$mvn_log"
    tr ':' '\n' <jars/s3a/classpath.txt | while read -r jar || [[ -n "$jar" ]]; do  # (no newline after the last)
      ln -f "$jar" jars/s3a/ 2>/dev/null || cp "$jar" jars/s3a/  # a hard link when ~/.m2 is on the same file system
    done
    rm -f jars/s3a/classpath.txt
  fi
  object_store_present || die "step 3d ran but build/bin/versitygw or jars/s3a/ (hadoop-aws-$hadoop_aws_version, bundle) is missing"
fi

# ---------------------------------------------------------------- 4. Airflow home
mkdir -p "$AIRFLOW_HOME"
say "initialising Airflow's metadata DB in $AIRFLOW_HOME (SQLite)"
"$VENV/bin/airflow" db migrate >"$AIRFLOW_HOME/setup-db-migrate.log" 2>&1 \
  || { tail -20 "$AIRFLOW_HOME/setup-db-migrate.log" >&2; die "airflow db migrate failed (log: $AIRFLOW_HOME/setup-db-migrate.log)"; }
# The connection in the DB is what the UI shows; $AIRFLOW_CONN_SPARK_DEFAULT (exported by the
# Makefile) overrides it for every command run through make.
"$VENV/bin/airflow" connections delete spark_default >/dev/null 2>&1 || true
"$VENV/bin/airflow" connections add spark_default --conn-type spark --conn-host 'local[2]' \
  --conn-description 'streamtable: spark-submit on this machine (local[2])' >/dev/null \
  || die "could not create the spark_default connection"

archive_status=0
if [[ -n "$archive_pid" ]]; then
  wait "$archive_pid" || archive_status=$?
fi
case "$archive_status" in
  0) ;;
  2) tail -5 "$archive_log" >&2
     say "warning: the class archive was recorded but not kept in $CLASS_ARCHIVE_CACHE (above): the next make setup tries again" ;;
  *) tail -5 "$archive_log" >&2
     say "warning: no class archive (python -m streamtable.deploy.class_archive failed): Spark drivers start without it; the next make setup tries again" ;;
esac
rm -f "$archive_log"

if (( archive_status == 0 )); then
  echo "$inputs_hash" >"$STAMP"
fi

# ---------------------------------------------------------------- 5. PostgreSQL (optional)
postgres
say "done in $(( $(date +%s) - started )) s"
