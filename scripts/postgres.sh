#!/usr/bin/env bash
# PostgreSQL for Airflow's metadata DB (the integration test and a production-like local Airflow):
# Debian's `postgresql`, one cluster listening on 127.0.0.1, role `airflow` (password `airflow`,
# CREATEDB so the integration test can make its own fresh database) and database `airflow`.
#
#   scripts/postgres.sh start    # install (root + apt, when missing), start the cluster, create role
#                                # and database (idempotent); prints the SQLAlchemy URL on stdout
#   scripts/postgres.sh status   # exit 0 when the role can log in over TCP (prints the URL), else 3
#   scripts/postgres.sh url      # the SQLAlchemy URL of the database (no check)
#   scripts/postgres.sh stop     # stop the cluster
#
# Exit codes: 0 ok; 3 PostgreSQL is not available and this user cannot install or start it (not
# root, or no apt-get): `make setup` then only says that the integration test needs PostgreSQL;
# 1 anything else went wrong.
# Environment: STREAMTABLE_PG_HOST [127.0.0.1], STREAMTABLE_PG_PORT [the cluster's, else 5432],
# STREAMTABLE_PG_USER [airflow], STREAMTABLE_PG_PASSWORD [airflow], STREAMTABLE_PG_DB [airflow],
# STREAMTABLE_PG_NO_INSTALL=1 (never apt-get install).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_HOST="${STREAMTABLE_PG_HOST:-127.0.0.1}"
PG_USER="${STREAMTABLE_PG_USER:-airflow}"
PG_PASSWORD="${STREAMTABLE_PG_PASSWORD:-airflow}"
PG_DB="${STREAMTABLE_PG_DB:-airflow}"
PYTHON="$ROOT/.venv/bin/python"

say() { printf 'postgres: %s\n' "$*" >&2; }
die() { printf 'postgres: ERROR: %s\n' "$*" >&2; exit 1; }
unavailable() { printf 'postgres: %s\n' "$*" >&2; exit 3; }

# The newest installed server version ("15"), from Debian's layout /usr/lib/postgresql/<version>/bin.
server_version() {
  local v
  v="$(ls -1 /usr/lib/postgresql 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -1 || true)"
  [[ -n "$v" && -x "/usr/lib/postgresql/$v/bin/postgres" ]] && echo "$v"
}

# "VERSION CLUSTER PORT STATUS" of the first cluster of the newest version (pg_lsclusters), if any.
cluster_line() {
  command -v pg_lsclusters >/dev/null || return 1
  pg_lsclusters --no-header 2>/dev/null | awk -v v="$1" '$1 == v {print $1, $2, $3, $4; exit}'
}

port() {
  if [[ -n "${STREAMTABLE_PG_PORT:-}" ]]; then
    echo "$STREAMTABLE_PG_PORT"
    return
  fi
  local v line
  if v="$(server_version)" && line="$(cluster_line "$v")" && [[ -n "$line" ]]; then
    echo "$line" | cut -d' ' -f3
  else
    echo 5432
  fi
}

url() { echo "postgresql+psycopg2://$PG_USER:$PG_PASSWORD@$PG_HOST:$(port)/$PG_DB"; }

# Can the role log in over TCP? (psycopg2 from the venv, else psql; neither: no.)
can_login() {
  local p
  p="$(port)"
  if [[ -x "$PYTHON" ]] && "$PYTHON" -c 'import psycopg2' 2>/dev/null; then
    "$PYTHON" - "$PG_HOST" "$p" "$PG_USER" "$PG_PASSWORD" "$PG_DB" <<'EOF' 2>/dev/null
import sys, psycopg2
host, port, user, password, db = sys.argv[1:]
psycopg2.connect(host=host, port=int(port), user=user, password=password, dbname=db, connect_timeout=3).close()
EOF
  elif command -v psql >/dev/null; then
    PGPASSWORD="$PG_PASSWORD" PGCONNECT_TIMEOUT=3 psql -h "$PG_HOST" -p "$p" -U "$PG_USER" -d "$PG_DB" -qAtc 'select 1' >/dev/null 2>&1
  else
    return 1
  fi
}

as_postgres() {  # run a command as the postgres OS user (peer authentication over the local socket)
  if command -v runuser >/dev/null; then
    runuser -u postgres -- "$@"
  else
    su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
  fi
}

sql_literal() { printf "'%s'" "${1//\'/\'\'}"; }

cmd_start() {
  if can_login; then
    say "already running: $PG_USER can log in to $PG_DB on $PG_HOST:$(port)"
    url
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    unavailable "PostgreSQL is not reachable as $PG_USER@$PG_HOST:$(port)/$PG_DB and only root can install or start it here: run 'sudo scripts/postgres.sh start' (the integration test needs it)"
  fi

  local v
  if ! v="$(server_version)"; then
    [[ "${STREAMTABLE_PG_NO_INSTALL:-0}" != 1 ]] || unavailable "no PostgreSQL server installed (and STREAMTABLE_PG_NO_INSTALL=1)"
    command -v apt-get >/dev/null || unavailable "no PostgreSQL server installed and no apt-get to install it: install PostgreSQL and run this again"
    say "installing PostgreSQL with apt-get (Debian's postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    v="$(server_version)" || die "apt-get installed postgresql but no server is in /usr/lib/postgresql/*/bin"
  fi

  local line name cport status
  line="$(cluster_line "$v" || true)"
  if [[ -z "$line" ]]; then
    say "creating PostgreSQL $v cluster 'main'"
    pg_createcluster "$v" main >/dev/null
    line="$(cluster_line "$v")"
  fi
  read -r _ name cport status <<<"$line"
  if [[ -n "${STREAMTABLE_PG_PORT:-}" && "$STREAMTABLE_PG_PORT" != "$cport" ]]; then
    die "cluster $v/$name listens on port $cport, not STREAMTABLE_PG_PORT=$STREAMTABLE_PG_PORT"
  fi
  if [[ "$status" != online* ]]; then
    say "starting PostgreSQL $v/$name on port $cport"
    # Debian's default listen_addresses is 'localhost' (127.0.0.1 and ::1) and pg_hba.conf allows
    # password (scram) logins from 127.0.0.1: nothing to change for a local Airflow.
    pg_ctlcluster "$v" "$name" start || { tail -20 "/var/log/postgresql/postgresql-$v-$name.log" >&2 || true; die "pg_ctlcluster $v $name start failed"; }
  fi
  local i
  for ((i = 0; i < 60; i++)); do
    as_postgres psql -p "$cport" -qAtc 'select 1' >/dev/null 2>&1 && break
    sleep 0.5
  done
  # Role and database, idempotently (psql's \gexec runs the CREATE only when the SELECT returns it).
  as_postgres psql -p "$cport" -v ON_ERROR_STOP=1 -qAt >/dev/null <<EOF
SELECT 'CREATE ROLE $PG_USER LOGIN CREATEDB' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = $(sql_literal "$PG_USER"))
\gexec
ALTER ROLE $PG_USER WITH LOGIN CREATEDB PASSWORD $(sql_literal "$PG_PASSWORD");
SELECT 'CREATE DATABASE $PG_DB OWNER $PG_USER' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = $(sql_literal "$PG_DB"))
\gexec
EOF
  STREAMTABLE_PG_PORT="$cport" can_login || die "PostgreSQL runs, but $PG_USER cannot log in to $PG_DB on $PG_HOST:$cport with its password (pg_hba.conf?)"
  say "ready: role $PG_USER, database $PG_DB on $PG_HOST:$cport"
  STREAMTABLE_PG_PORT="$cport" url
}

cmd_status() {
  if can_login; then
    url
    return 0
  fi
  say "$PG_USER cannot log in to $PG_DB on $PG_HOST:$(port)"
  return 3
}

cmd_stop() {
  local v line
  v="$(server_version)" && line="$(cluster_line "$v")" && [[ -n "$line" ]] || { say "no cluster"; return 0; }
  read -r v name _ status <<<"$line"
  [[ "$status" == online* ]] || { say "$v/$name is not running"; return 0; }
  [[ "$(id -u)" == 0 ]] || die "only root can stop the cluster"
  pg_ctlcluster "$v" "$name" stop
  say "stopped $v/$name"
}

case "${1:-}" in
  start) cmd_start ;;
  status) cmd_status ;;
  url) url ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|status|url|stop   (see the header of this script)" >&2; exit 2 ;;
esac
