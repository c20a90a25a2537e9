#!/usr/bin/env bash
# Shell functions shared by scripts/bench and scripts/bench-peers (sourced, not run). They use the
# caller's globals: work (scratch directory), problems (array of problems for the report), pg_bin,
# pg_dir, pg_port, pg_running, pg_ok, pg_options, pg_settings, pg_version, pgbench_args, as_pg,
# pg_runs, pg_checked.

# ---------------------------------------------------------------------------------------------
# Figures and tables

# field LINE KEY: the value of KEY=... in a RESULT line.
field() {
  local v
  v=$(tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1)
  echo "${v:-n/a}"
}

# median of the arguments (numbers)
median() { printf '%s\n' "$@" | { grep -E '^-?[0-9.]+$' || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Markdown tables: runs_header, then one row per figure.
row() { # row LABEL VALUES...: "| label | median | v1 | v2 | ... |"
  local label=$1
  shift
  printf '| %s | **%s** |' "$label" "$(median "$@")"
  printf ' %s |' "$@"
  printf '\n'
}
runs_header() {
  printf '| | median |'
  for r in $(seq 1 "$rounds"); do printf ' run %s |' "$r"; done
  printf '\n|---|---|'
  for _ in $(seq 1 "$rounds"); do printf -- '---|'; done
  printf '\n'
}
fmt_args() { printf '%s ' "$@" | sed 's/ $//'; }

# rss PID KEY: VmRSS or VmHWM of the process, in MiB.
rss() { awk -v k="$2:" '$1 == k { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo n/a; }

# ---------------------------------------------------------------------------------------------
# A throwaway PostgreSQL 15 cluster and pgbench (the two-phase commit comparison)

# pg_stop: stops the throwaway PostgreSQL cluster (if it runs) and removes its data directory.
pg_stop() {
  if [ "$pg_running" = 1 ]; then
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    pg_running=0
  fi
  if [ -n "$pg_dir" ] && [ "${BENCH_KEEP:-0}" != 1 ]; then rm -rf "$pg_dir/data"; fi
}

pg_psql() { "$pg_bin/psql" -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }

# pg_start: a throwaway PostgreSQL 15 cluster in $work/pg, owned by the postgres user, listening on
# 127.0.0.1 only (no Unix socket) on a free port, max_prepared_transactions=64, every durability
# setting at its default (fsync, synchronous_commit and full_page_writes on). Sets pg_ok=1.
pg_start() {
  if [ ! -x "$pg_bin/initdb" ] || [ ! -x "$pg_bin/pgbench" ]; then
    echo "-- installing PostgreSQL 15 (apt-get install postgresql-15)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get install -y -qq --no-install-recommends postgresql-15 postgresql-client-15 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql-15 postgresql-client-15; }; } \
      >"$work/pg-install.log" 2>&1; then
      problems+=("PostgreSQL 15 could not be installed (log $work/pg-install.log): no comparison")
      return 0
    fi
  fi
  pg_dir=$work/pg
  mkdir -p "$pg_dir"
  if [ "$(id -u)" = 0 ]; then
    as_pg=(runuser -u postgres --)
    chmod o+x "$work"
    chown postgres: "$pg_dir"
  fi
  chmod 700 "$pg_dir"
  if ! "${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --locale=C \
    >"$work/pg-initdb.log" 2>&1; then
    problems+=("initdb failed (log $work/pg-initdb.log): no PostgreSQL comparison")
    return 0
  fi
  pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
    -o "$pg_options -p $pg_port" start >"$work/pg-start.log" 2>&1; then
    problems+=("PostgreSQL did not start: $(tr '\n' ' ' <"$work/pg-start.log" | cut -c1-300) (log $pg_dir/server.log)")
    pg_running=1  # pg_ctl may have left it half-started: stop it at exit all the same
    return 0
  fi
  pg_running=1
  pg_psql -c "CREATE TABLE t (id bigserial PRIMARY KEY, v text NOT NULL)"
  pg_settings=$(pg_psql -At -F ' = ' -c "SELECT name, current_setting(name) FROM pg_settings
    WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'commit_delay',
                   'wal_level', 'max_prepared_transactions', 'shared_buffers', 'checkpoint_timeout', 'max_wal_size')
    ORDER BY name")
  pg_version=$(pg_psql -At -c "SHOW server_version")
  pg_version=${pg_version%% *}
  cat >"$work/pg-2pc.sql" <<'SQL'
\set r random(1, 1000000000)
BEGIN;
INSERT INTO t(v) VALUES (repeat('x', 1024));
PREPARE TRANSACTION 'pgbench-:client_id-:r';
COMMIT PREPARED 'pgbench-:client_id-:r';
SQL
  cat >"$work/pg-1pc.sql" <<'SQL'
BEGIN;
INSERT INTO t(v) VALUES (repeat('x', 1024));
COMMIT;
SQL
  pg_ok=1
}

# pg_run NAME SCRIPT: empties the table (TRUNCATE, CHECKPOINT), runs pgbench with 8 clients for
# tx_seconds, then checks that the table holds one row per transaction pgbench counted and that no
# prepared transaction is left. Sets pg_tps, pg_p50, pg_p99 (from pgbench's per-transaction log).
pg_run() {
  local name=$1 script=$2 rc=0 processed failed rows prepared gid
  local dir=$work/pgbench-$name
  pg_tps=n/a; pg_p50=n/a; pg_p99=n/a
  [ "$pg_ok" = 1 ] || return 0
  mkdir -p "$dir"
  # A prepared transaction left by an earlier run would hold a lock TRUNCATE waits for.
  for gid in $(pg_psql -At -c "SELECT gid FROM pg_prepared_xacts"); do pg_psql -c "ROLLBACK PREPARED '$gid'"; done
  pg_psql -c "TRUNCATE t" -c "CHECKPOINT"
  echo "  \$ pgbench $(fmt_args "${pgbench_args[@]}") -f $(basename "$script") -l"
  (cd "$dir" && "$pg_bin/pgbench" "${pgbench_args[@]}" -h 127.0.0.1 -p "$pg_port" -f "$script" -l postgres) \
    >"$dir/out.txt" 2>&1 || rc=$?
  grep -E '^(number of (transactions actually processed|failed transactions)|latency average|tps)[ :=]' "$dir/out.txt" |
    sed 's/^/    /' || true
  pg_runs=$((pg_runs + 1))
  pg_tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$dir/out.txt" | head -1)
  [ -n "$pg_tps" ] && pg_tps=$(printf '%.1f' "$pg_tps") || pg_tps=n/a
  processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$dir/out.txt" | head -1)
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$dir/out.txt" | head -1)
  # Per-transaction log lines: client, transaction number, latency in µs, ...
  read -r pg_p50 pg_p99 < <(cat "$dir"/pgbench_log.* 2>/dev/null | awk '{ print $3 }' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a n/a"; else print v[int(0.5 * (NR - 1) + 0.5) + 1], v[int(0.99 * (NR - 1) + 0.5) + 1] }')
  rows=$(pg_psql -At -c "SELECT count(*) FROM t")
  prepared=$(pg_psql -At -c "SELECT count(*) FROM pg_prepared_xacts")
  if [ $rc -ne 0 ] || [ "${failed:-x}" != 0 ]; then
    problems+=("pgbench $name exited $rc with ${failed:-?} failed transactions: $(grep -iE 'error|abort' "$dir/out.txt" | head -3 | tr '\n' ' ' | cut -c1-400)")
  elif [ "$rows" != "$processed" ] || [ "$prepared" != 0 ]; then
    problems+=("PostgreSQL $name: pgbench counted $processed transactions, the table holds $rows rows, $prepared prepared transactions left")
  else
    pg_checked=$((pg_checked + 1))
  fi
  rm -f "$dir"/pgbench_log.*
}
