#!/usr/bin/env bash
# A Spark standalone cluster on this machine (one master, one worker) from the Spark that pip installed
# into .venv, for `serve` jobs submitted by Airflow's stream_* DAGs and for the integration test.
#
#   scripts/spark-cluster.sh start    # starts master + worker (if not running), waits for the worker,
#                                     # prints the master URL (spark://127.0.0.1:7077) on stdout
#   scripts/spark-cluster.sh status   # prints the master URL and the alive workers; exit 3 when down
#   scripts/spark-cluster.sh stop     # stops worker and master, with their executors
#
# pyspark's wheel has bin/spark-class but not sbin/start-master.sh, so the daemons are started with
# `spark-class org.apache.spark.deploy.{master.Master,worker.Worker}` under nohup + setsid (each in its
# own process group, which `stop` signals whole: a worker's executors are in its group). Both are
# idempotent: `start` leaves running daemons alone, `stop` on a stopped cluster does nothing.
#
# Environment (defaults in brackets):
#   SPARK_CLUSTER_DIR [build/spark-cluster]  pid files, logs (master.log, worker.log), the worker's work dir
#   SPARK_CLUSTER_VENV [.venv]  the virtual environment whose pyspark runs the daemons (an installed package's, in a test)
#   SPARK_MASTER_HOST [127.0.0.1]  SPARK_MASTER_PORT [7077]  SPARK_MASTER_WEBUI_PORT [9090]
#   SPARK_WORKER_WEBUI_PORT [9091]  SPARK_WORKER_CORES [2]  SPARK_WORKER_MEMORY [4g]
#   SPARK_DAEMON_MEMORY [512m]  SPARK_CLUSTER_WAIT_S [180]  JAVA_HOME [from `java` on PATH]
#   SPARK_CLUSTER_WORKERS [1]  0: the master alone (its workers run on other hosts; tests/test_two_hosts.py), and
#                              `start` waits only for the master. The daemons bind to SPARK_MASTER_HOST.
# Executors run with the venv's Python (PYSPARK_PYTHON); the project's jars come with each job
# (spark-submit --jars, which streamtable.airflow.tasks passes).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARK_CLUSTER_VENV:-$ROOT/.venv}"  # whose Spark (bin/spark-class) and Python the daemons run
DIR="$(realpath -m "${SPARK_CLUSTER_DIR:-$ROOT/build/spark-cluster}")"
HOST="${SPARK_MASTER_HOST:-127.0.0.1}"
PORT="${SPARK_MASTER_PORT:-7077}"
WEBUI="${SPARK_MASTER_WEBUI_PORT:-9090}"
WORKER_WEBUI="${SPARK_WORKER_WEBUI_PORT:-9091}"
CORES="${SPARK_WORKER_CORES:-2}"
MEMORY="${SPARK_WORKER_MEMORY:-4g}"
WAIT_S="${SPARK_CLUSTER_WAIT_S:-180}"
WORKERS="${SPARK_CLUSTER_WORKERS:-1}"
MASTER_URL="spark://$HOST:$PORT"
MASTER_CLASS=org.apache.spark.deploy.master.Master
WORKER_CLASS=org.apache.spark.deploy.worker.Worker

say() { printf 'spark-cluster: %s\n' "$*" >&2; }
die() { printf 'spark-cluster: ERROR: %s\n' "$*" >&2; exit 1; }

# The pid in $DIR/NAME.pid if that process is alive and is still the daemon (not a reused pid).
daemon_pid() {
  local name="$1" class="$2" pid
  [[ -f "$DIR/$name.pid" ]] || return 1
  pid="$(cat "$DIR/$name.pid")"
  [[ "$pid" =~ ^[0-9]+$ ]] && [[ -r "/proc/$pid/cmdline" ]] || return 1
  # No pipe into `grep -q` here: it exits at its first match, tr gets SIGPIPE on a long JVM command line, and
  # pipefail turned a live daemon into a dead one (a start that failed, a stop that left the daemon running).
  local cmdline
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *"$class"* ]] || return 1
  echo "$pid"
}

# The master's web UI JSON (/json/): prints "STATUS ALIVEWORKERS", or fails when it does not answer.
master_state() {
  "$VENV/bin/python" - "$HOST" "$WEBUI" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/json/", timeout=3) as r:
        state = json.load(r)
except Exception:
    sys.exit(1)
print(state.get("status", "?"), state.get("aliveworkers", 0))
EOF
}

# True while the process launched as NAME lives. The wait after a launch uses this, not daemon_pid: between
# the fork and nohup's exec, /proc/PID/cmdline is still this script's, and a busy machine showed that
# window (a healthy master reported as exited, with an empty log).
launched_alive() {
  local pid stat
  pid="$(cat "$DIR/$1.pid" 2>/dev/null)" && [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat%% *}" != Z ]]  # a daemon that exited but is not yet reaped is a zombie: not alive
}

port_busy() {  # true when something listens on 127.0.0.1:$1 (bash's /dev/tcp: no extra tool needed)
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

launch() {  # launch NAME CLASS ARGS...: the daemon in its own session, its pid in $DIR/NAME.pid
  local name="$1"
  shift
  : >"$DIR/$name.log"
  # setsid: its own process group (stop signals the group: the worker's executors too) and no
  # controlling terminal; nohup: survives the shell that started it. spark-class execs java, so $! is
  # the JVM's pid.
  nohup setsid "$VENV/bin/spark-class" "$@" >>"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

stop_daemon() {  # stop_daemon NAME CLASS: SIGTERM its process group, SIGKILL after 15 s
  local name="$1" class="$2" pid i
  if ! pid="$(daemon_pid "$name" "$class")"; then
    rm -f "$DIR/$name.pid"
    return 0
  fi
  say "stopping the $name (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "the $name did not stop in 15 s: SIGKILL"
  fi
  kill -KILL -- "-$pid" 2>/dev/null || true  # whatever is left of its group (executors)
  rm -f "$DIR/$name.pid"
}

cmd_start() {
  [[ -x "$VENV/bin/spark-class" ]] || die "no $VENV/bin/spark-class: run make setup first"
  if [[ -z "${JAVA_HOME:-}" ]]; then
    local java
    java="$(command -v java)" || die "no java on PATH and JAVA_HOME is not set (Java 17+ is needed)"
    JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$java")")")"
  fi
  export JAVA_HOME SPARK_LOCAL_IP="$HOST" SPARK_DAEMON_MEMORY="${SPARK_DAEMON_MEMORY:-512m}"
  export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$VENV/bin/python}"
  export SPARK_NO_DAEMONIZE=1
  mkdir -p "$DIR/work"

  if daemon_pid master "$MASTER_CLASS" >/dev/null; then
    say "master already running (pid $(cat "$DIR/master.pid"))"
  else
    port_busy "$PORT" && die "port $HOST:$PORT is in use by another process (not this cluster's master): set SPARK_MASTER_PORT"
    port_busy "$WEBUI" && die "port $HOST:$WEBUI is in use: set SPARK_MASTER_WEBUI_PORT"
    say "starting the master on $MASTER_URL (web UI http://$HOST:$WEBUI, log $DIR/master.log)"
    launch master "$MASTER_CLASS" --host "$HOST" --port "$PORT" --webui-port "$WEBUI"
  fi
  if ((WORKERS == 0)); then
    :
  elif daemon_pid worker "$WORKER_CLASS" >/dev/null; then
    say "worker already running (pid $(cat "$DIR/worker.pid"))"
  else
    port_busy "$WORKER_WEBUI" && die "port $HOST:$WORKER_WEBUI is in use: set SPARK_WORKER_WEBUI_PORT"
    say "starting a worker ($CORES cores, $MEMORY; log $DIR/worker.log)"
    launch worker "$WORKER_CLASS" "$MASTER_URL" --host "$HOST" --cores "$CORES" --memory "$MEMORY" \
      --webui-port "$WORKER_WEBUI" --work-dir "$DIR/work"
  fi

  local deadline=$((SECONDS + WAIT_S)) state=""
  while ((SECONDS < deadline)); do
    launched_alive master || { tail -30 "$DIR/master.log" >&2; die "the master exited (log above: $DIR/master.log)"; }
    ((WORKERS == 0)) || launched_alive worker || { tail -30 "$DIR/worker.log" >&2; die "the worker exited (log above: $DIR/worker.log)"; }
    if state="$(master_state)" && [[ "$state" == ALIVE* ]] && (("${state#* }" >= WORKERS)); then
      say "ready: master ALIVE, ${state#* } worker(s) registered"
      echo "$MASTER_URL"
      return 0
    fi
    sleep 1
  done
  tail -15 "$DIR/master.log" "$DIR/worker.log" >&2 || true
  die "no worker registered with the master within ${WAIT_S} s (last state: ${state:-no answer from http://$HOST:$WEBUI/json/})"
}

cmd_status() {
  local master worker state
  master="$(daemon_pid master "$MASTER_CLASS" || echo -)"
  worker="$(daemon_pid worker "$WORKER_CLASS" || echo -)"
  state="$(master_state || echo "DOWN 0")"
  say "master pid $master, worker pid $worker, master $state (alive workers: ${state#* })"
  if [[ "$master" != - && "$state" == ALIVE* ]] && (("${state#* }" >= 1)); then
    echo "$MASTER_URL"
    return 0
  fi
  return 3
}

cmd_stop() {
  stop_daemon worker "$WORKER_CLASS"
  stop_daemon master "$MASTER_CLASS"
  say "stopped"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status   (see the header of this script)" >&2; exit 2 ;;
esac
