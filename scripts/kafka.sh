#!/usr/bin/env bash
# A local Apache Kafka broker (KRaft: one JVM is controller and broker) on 127.0.0.1, from the jars that
# `make setup` fetched into jars/kafka/ (jars/kafka/pom.xml), for users (`make -s kafka`) and tests.
#
#   scripts/kafka.sh start    # starts the broker (if not running), waits until it answers a metadata request,
#                             # prints `export STREAMTABLE_KAFKA=127.0.0.1:PORT` on stdout (nothing else there)
#   scripts/kafka.sh status   # prints the export line and exits 0 when the broker runs; exit 3 when it does not
#   scripts/kafka.sh stop     # SIGTERM, SIGKILL after 30 s; exit 0 when nothing runs either
#
# A topic is created on its first use, with 3 partitions (auto.create.topics.enable=true, num.partitions=3);
# every replication factor is 1. The first start formats the storage (kafka.tools.StorageTool) with a new
# cluster id; later starts reuse the data. `start` is idempotent and holds a file lock, so two concurrent starts
# make one broker. Diagnostics go to stderr, the broker's own logs to $DIR/logs/server.log (log4j2).
#
# Environment (defaults in brackets):
#   STREAMTABLE_KAFKA_DIR [build/kafka]  config, data (data/), logs (logs/), pid and port files: a test that
#                                        restarts a broker of its own gives it a directory of its own
#   STREAMTABLE_KAFKA_PORT  the client (PLAINTEXT) port; start fails when something else listens on it.
#                           Unset: the port remembered in $DIR/port, else 19092 when free, else one the OS picks
#   STREAMTABLE_KAFKA_HEAP [512m]  STREAMTABLE_KAFKA_WAIT_S [60]  JAVA_HOME [from `java` on PATH]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$(realpath -m "${STREAMTABLE_KAFKA_DIR:-$ROOT/build/kafka}")"
JARS="$ROOT/jars/kafka"
HOST=127.0.0.1
DEFAULT_PORT=19092
HEAP="${STREAMTABLE_KAFKA_HEAP:-512m}"
WAIT_S="${STREAMTABLE_KAFKA_WAIT_S:-60}"
MAIN_CLASS=kafka.Kafka
CONFIG="$DIR/server.properties"
PYTHON="$ROOT/.venv/bin/python"
[[ -x "$PYTHON" ]] || PYTHON=python3

say() { printf 'kafka: %s\n' "$*" >&2; }
die() { printf 'kafka: ERROR: %s\n' "$*" >&2; exit 1; }

port_busy() {  # true when something listens on 127.0.0.1:$1 (bash's /dev/tcp: no extra tool needed)
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

free_port() {  # a port nobody listens on, picked by the OS
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The broker's pid if the process in $DIR/kafka.pid is alive and is this directory's broker (not a reused pid).
broker_pid() {
  local pid cmdline
  [[ -f "$DIR/kafka.pid" ]] || return 1
  pid="$(cat "$DIR/kafka.pid")"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  # No `tr ... | grep -q`: grep exits at its first match, tr gets SIGPIPE, and pipefail makes a live broker dead.
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *"$MAIN_CLASS $CONFIG"* ]] || return 1
  echo "$pid"
}

# The port of a broker that runs (from its port file); fails when none runs or it does not listen.
running_port() {
  local port
  broker_pid >/dev/null && [[ -f "$DIR/port" ]] || return 1
  port="$(cat "$DIR/port")"
  port_busy "$port" || return 1
  echo "$port"
}

# Does the broker answer a metadata request? (confluent_kafka from the venv; without it, its log's "started" line.)
answers() {
  local port="$1"
  if "$PYTHON" -c 'import confluent_kafka' 2>/dev/null; then
    "$PYTHON" - "$HOST:$port" <<'EOF' 2>/dev/null
import sys
from confluent_kafka.admin import AdminClient
metadata = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0}).list_topics(timeout=3)
sys.exit(0 if metadata.brokers else 1)
EOF
  else
    port_busy "$port" && grep -qs "Kafka Server started" "$DIR/logs/server.log"
  fi
}

export_line() { echo "export STREAMTABLE_KAFKA=$HOST:$1"; }

java_bin() {
  local java
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    java="$JAVA_HOME/bin/java"
  else
    java="$(command -v java)" || die "no java on PATH and JAVA_HOME is not set (Kafka 4 needs Java 17+)"
  fi
  echo "$java"
}

# The client port of this start: explicit, remembered, the default, or a free one (in that order).
choose_port() {
  local port
  if [[ -n "${STREAMTABLE_KAFKA_PORT:-}" ]]; then
    port="$STREAMTABLE_KAFKA_PORT"
    [[ "$port" =~ ^[0-9]+$ ]] || die "STREAMTABLE_KAFKA_PORT=$port is not a port number"
    port_busy "$port" && die "port $HOST:$port (STREAMTABLE_KAFKA_PORT) is in use by another process, not this directory's broker ($DIR)"
  elif [[ -f "$DIR/port" ]] && ! port_busy "$(cat "$DIR/port")"; then
    port="$(cat "$DIR/port")"
  else
    [[ -f "$DIR/port" ]] && say "port $(cat "$DIR/port") (remembered in $DIR/port) is taken by another process: picking another"
    port="$DEFAULT_PORT"
    port_busy "$port" && port="$(free_port)"
  fi
  echo "$port"
}

write_config() {  # write_config PORT CONTROLLER_PORT: server.properties and log4j2.properties in $DIR
  cat >"$CONFIG" <<EOF
# Written by scripts/kafka.sh on every start (edits here are lost): one node, controller and broker.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$2
listeners=PLAINTEXT://$HOST:$1,CONTROLLER://$HOST:$2
advertised.listeners=PLAINTEXT://$HOST:$1
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DIR/data
num.partitions=3
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
EOF
  cat >"$DIR/log4j2.properties" <<EOF
# Written by scripts/kafka.sh: every logger to logs/server.log (INFO; 3 files of 10 MB at most).
appender.file.type=RollingFile
appender.file.name=file
appender.file.fileName=$DIR/logs/server.log
appender.file.filePattern=$DIR/logs/server.log.%i
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
appender.file.policies.type=Policies
appender.file.policies.size.type=SizeBasedTriggeringPolicy
appender.file.policies.size.size=10MB
appender.file.strategy.type=DefaultRolloverStrategy
appender.file.strategy.max=3
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
logger.request.name=kafka.request.logger
logger.request.level=WARN
EOF
}

cmd_start() {
  compgen -G "$JARS/kafka_2.13-*.jar" >/dev/null || die "no Kafka jars in $JARS: run make setup first"
  mkdir -p "$DIR/logs"
  # One start at a time per directory. The lock's fd is closed for the broker (9>&-): it must not hold it.
  exec 9>"$DIR/start.lock"
  flock -w 120 9 || die "another scripts/kafka.sh start on $DIR did not finish in 120 s"

  local port pid java
  if port="$(running_port)"; then
    if [[ -n "${STREAMTABLE_KAFKA_PORT:-}" && "$STREAMTABLE_KAFKA_PORT" != "$port" ]]; then
      die "the broker of $DIR already runs on port $port, not STREAMTABLE_KAFKA_PORT=$STREAMTABLE_KAFKA_PORT"
    fi
    pid="$(broker_pid)"
    say "already running (pid $pid, $DIR)"
  else
    if pid="$(broker_pid)"; then  # alive but not listening: hung or half-started, start afresh
      say "broker pid $pid does not listen: stopping it"
      stop_broker
    fi
    java="$(java_bin)"
    port="$(choose_port)"
    local controller_port
    controller_port="$(free_port)"
    while [[ "$controller_port" == "$port" ]]; do controller_port="$(free_port)"; done
    write_config "$port" "$controller_port"
    local -a jvm=("$java" -Xms128m "-Xmx$HEAP" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
      "-Dlog4j2.configurationFile=$DIR/log4j2.properties" -cp "$JARS/*")
    if [[ ! -f "$DIR/data/meta.properties" ]]; then
      local cluster_id
      cluster_id="$("$PYTHON" -c 'import base64, uuid
while (i := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"): pass
print(i)')"
      say "formatting $DIR/data (cluster id $cluster_id)"
      "${jvm[@]}" kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" -c "$CONFIG" >"$DIR/logs/format.log" 2>&1 \
        || { cat "$DIR/logs/format.log" >&2; die "formatting the storage failed (log above: $DIR/logs/format.log)"; }
    fi
    echo "$port" >"$DIR/port"
    # This run's log starts empty (the previous run's is kept beside it): the readiness check may read it.
    if [[ -s "$DIR/logs/server.log" ]]; then mv -f "$DIR/logs/server.log" "$DIR/logs/server.log.previous"; fi
    local jar=("$JARS"/kafka_2.13-*.jar) version
    version="${jar[0]##*/kafka_2.13-}"
    say "starting Kafka ${version%.jar} on $HOST:$port (data $DIR/data, log $DIR/logs/server.log)"
    # setsid + nohup: its own process group, no terminal, survives this shell; exec'd java, so $! is the JVM.
    nohup setsid "${jvm[@]}" "$MAIN_CLASS" "$CONFIG" >"$DIR/logs/stdout.log" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$DIR/kafka.pid"
  fi

  local deadline=$((SECONDS + WAIT_S))
  while ((SECONDS < deadline)); do
    # kill -0, not broker_pid: just after the launch $! may not have exec'd java yet (its cmdline is still bash's).
    kill -0 "$pid" 2>/dev/null || { tail -30 "$DIR/logs/stdout.log" "$DIR/logs/server.log" >&2 2>/dev/null || true; die "the broker exited (logs: $DIR/logs/)"; }
    if port_busy "$port" && answers "$port"; then
      export_line "$port"
      return 0
    fi
    sleep 0.5
  done
  tail -20 "$DIR/logs/server.log" >&2 2>/dev/null || true
  die "the broker on $HOST:$port did not answer within $WAIT_S s (it still runs: scripts/kafka.sh stop; logs: $DIR/logs/)"
}

stop_broker() {  # SIGTERM the broker's process group (a clean shutdown), SIGKILL after 30 s
  local pid i
  pid="$(broker_pid)" || { rm -f "$DIR/kafka.pid"; return 0; }
  say "stopping the broker (pid $pid, $DIR)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "the broker did not stop in 30 s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/kafka.pid"
}

cmd_stop() {
  [[ -d "$DIR" ]] || { say "not running ($DIR does not exist)"; return 0; }
  exec 9>"$DIR/start.lock"
  flock -w 120 9 || die "a scripts/kafka.sh start on $DIR did not finish in 120 s"
  stop_broker
  say "stopped"
}

cmd_status() {
  local port
  if port="$(running_port)"; then
    say "running (pid $(broker_pid), $DIR)"
    export_line "$port"
    return 0
  fi
  say "not running ($DIR)"
  return 3
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status   (see the header of this script)" >&2; exit 2 ;;
esac
