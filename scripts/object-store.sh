#!/usr/bin/env bash
# A local S3-compatible object store (versitygw, its posix backend) for s3:// and s3a:// lakes and their tests.
# Set-up builds the server once into ${XDG_CACHE_HOME:-~/.cache}/streamtable/bin and links it to build/bin/versitygw.
#
#   scripts/object-store.sh start    # starts the server (if not running), waits until it answers, creates the
#                                    # bucket `streamtable` if missing; prints shell `export` lines on stdout:
#                                    # eval "$(scripts/object-store.sh start)"   (make -s object-store)
#   scripts/object-store.sh status   # prints the exports and exits 0 when a server answers with our credentials,
#                                    # else exit 3
#   scripts/object-store.sh stop     # stops the server this data dir's pid file names (exit 0 when none runs)
#
# versitygw answers PutObject with `If-None-Match: *` (412 when the key exists) and `If-Match: <etag>`: delta-rs
# commits its log with the first (put-if-absent), and leases can use both.
# Only the export lines go to stdout; messages go to stderr.
#
# Environment (defaults in brackets):
#   STREAMTABLE_S3_HOST [127.0.0.1]  the address it listens on and the endpoint clients get: loopback unless
#                                    another network namespace (a veth address) must reach it
#   STREAMTABLE_S3_PORT [19000]
#   STREAMTABLE_S3_DIR [build/object-store]  data/ (the buckets: one folder each), server.pid, server.log
#   STREAMTABLE_S3_ACCESS_KEY [streamtable], STREAMTABLE_S3_SECRET_KEY [streamtable-local-only]: fixed development
#                                    credentials for a server on this machine only; never reuse them elsewhere
#   STREAMTABLE_S3_WAIT_S [30]       how long start waits for the server to answer
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOST="${STREAMTABLE_S3_HOST:-127.0.0.1}"
PORT="${STREAMTABLE_S3_PORT:-19000}"
DIR="$(realpath -m "${STREAMTABLE_S3_DIR:-$ROOT/build/object-store}")"
ACCESS_KEY="${STREAMTABLE_S3_ACCESS_KEY:-streamtable}"
SECRET_KEY="${STREAMTABLE_S3_SECRET_KEY:-streamtable-local-only}"
WAIT_S="${STREAMTABLE_S3_WAIT_S:-30}"
REGION=us-east-1
BUCKET=streamtable
SERVER="$ROOT/build/bin/versitygw"
ENDPOINT="http://$HOST:$PORT"

say() { printf 'object-store: %s\n' "$*" >&2; }
die() { printf 'object-store: ERROR: %s\n' "$*" >&2; exit 1; }

exports() {
  printf 'export %s=%q\n' \
    AWS_ENDPOINT_URL "$ENDPOINT" \
    AWS_ACCESS_KEY_ID "$ACCESS_KEY" \
    AWS_SECRET_ACCESS_KEY "$SECRET_KEY" \
    AWS_REGION "$REGION" \
    AWS_ALLOW_HTTP true
}

# curl, signed with AWS SigV4 (curl signs no payload hash of its own for S3: the header says UNSIGNED-PAYLOAD).
# Prints the HTTP status ("000" when nothing answers).
s3() {
  local method="$1" path="$2"
  shift 2
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X "$method" \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$@" "$ENDPOINT$path" || true
}

# The pid in server.pid if that process is alive and still versitygw (not a reused pid).
server_pid() {
  local pid cmdline
  [[ -f "$DIR/server.pid" ]] || return 1
  pid="$(cat "$DIR/server.pid")"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  # Read into a variable, no `| grep -q` (under pipefail its early exit can make a live daemon look dead).
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *versitygw* ]] || return 1
  echo "$pid"
}

# 0: answers with our credentials (ListBuckets 200); 1: nothing answers; 2: a server answers but refuses them.
answers() {
  local code
  code="$(s3 GET /)"
  case "$code" in
    200) return 0 ;;
    000) return 1 ;;
    *) return 2 ;;
  esac
}

# Whether the data dir's file system keeps user extended attributes, where versitygw stores ETags and metadata;
# when not (some tmpfs and overlay mounts), it keeps them in a sidecar folder instead.
xattrs_work() {
  local python probe="$DIR/.xattr-probe"
  python="$(command -v python3 || true)"
  [[ -x "$ROOT/.venv/bin/python" ]] && python="$ROOT/.venv/bin/python"
  [[ -n "$python" ]] || return 1
  : >"$probe"
  "$python" -c 'import os, sys; os.setxattr(sys.argv[1], "user.streamtable", b"1")' "$probe" 2>/dev/null
  local status=$?
  rm -f "$probe"
  return "$status"
}

launch() {
  local meta=()
  mkdir -p "$DIR/data"
  if ! xattrs_work; then
    say "$DIR does not keep extended attributes: versitygw keeps object metadata in $DIR/meta"
    mkdir -p "$DIR/meta"
    meta=(--sidecar "$DIR/meta")
  fi
  say "starting versitygw on $ENDPOINT (data $DIR/data, log $DIR/server.log)"
  # The credentials go in its environment, not on its command line; setsid: its own session (stop signals it
  # alone), nohup: it outlives this shell.
  ROOT_ACCESS_KEY_ID="$ACCESS_KEY" ROOT_SECRET_ACCESS_KEY="$SECRET_KEY" VGW_REGION="$REGION" \
    nohup setsid "$SERVER" --port "$HOST:$PORT" --quiet posix "${meta[@]}" "$DIR/data" \
    >>"$DIR/server.log" 2>&1 </dev/null 9>&- &  # 9>&-: not the start lock, or it would hold it as long as it runs
  echo $! >"$DIR/server.pid"
}

cmd_start() {
  command -v curl >/dev/null || die "curl is needed (it signs the requests that check the server and make the bucket)"
  mkdir -p "$DIR"
  exec 9>"$DIR/start.lock"
  flock 9  # concurrent starts (xdist workers, two make targets) take turns: one launches, the others find it up
  local status=0 pid=""
  answers || status=$?
  pid="$(server_pid || true)"
  if ((status == 2)); then
    die "something on $HOST:$PORT answers but refuses these credentials (another S3 server?): set STREAMTABLE_S3_PORT"
  elif ((status == 0)); then
    say "already running on $ENDPOINT${pid:+ (pid $pid)}"
  else
    [[ -x "$SERVER" ]] || die "no $SERVER: run make setup (it builds versitygw once, with Go)"
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
      die "port $HOST:$PORT is in use by something that is not an S3 server: set STREAMTABLE_S3_PORT"
    fi
    if [[ -n "$pid" ]]; then
      say "a versitygw (pid $pid) runs but does not answer: stopping it first"
      cmd_stop
    fi
    launch
    local launched deadline=$((SECONDS + WAIT_S))
    launched="$(cat "$DIR/server.pid")"
    while :; do
      # kill -0, not server_pid: between fork and exec the child's cmdline is still this script's (a busy machine
      # widens that window), which server_pid would take for a dead server.
      kill -0 "$launched" 2>/dev/null || { tail -20 "$DIR/server.log" >&2; die "versitygw exited (log above: $DIR/server.log)"; }
      status=0
      answers || status=$?
      ((status == 0)) && break
      ((status == 2)) && die "versitygw answers on $ENDPOINT but refuses its own credentials (log: $DIR/server.log)"
      ((SECONDS < deadline)) || { tail -20 "$DIR/server.log" >&2; die "versitygw did not answer on $ENDPOINT within $WAIT_S s"; }
      sleep 0.2
    done
    say "ready on $ENDPOINT (pid $(cat "$DIR/server.pid"))"
  fi
  local code
  code="$(s3 HEAD "/$BUCKET")"
  if [[ "$code" != 200 ]]; then
    code="$(s3 PUT "/$BUCKET")"
    [[ "$code" == 200 || "$code" == 409 ]] || die "could not create bucket $BUCKET (HTTP $code)"
    say "created bucket $BUCKET"
  fi
  exports
}

cmd_status() {
  local pid status=0
  pid="$(server_pid || echo -)"
  answers || status=$?
  case "$status" in
    0) say "running on $ENDPOINT (pid $pid)"; exports; return 0 ;;
    2) say "something on $HOST:$PORT refuses these credentials (pid file: $pid)"; return 3 ;;
    *) say "not answering on $ENDPOINT (pid $pid)"; return 3 ;;
  esac
}

cmd_stop() {
  local pid i
  if ! pid="$(server_pid)"; then
    rm -f "$DIR/server.pid"
    say "not running (no live pid in $DIR/server.pid)"
    return 0
  fi
  say "stopping versitygw (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "it did not stop in 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/server.pid"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status   (see the header of this script)" >&2; exit 2 ;;
esac
