#!/usr/bin/env bash
# Stops every service of the local stack (SIGTERM / pg_ctl fast shutdown, then SIGKILL).
# Idempotent. `stack/down.sh --wipe` also deletes the data dirs (.stack/data); the
# download cache (.stack/cache) and logs are kept.
set -euo pipefail
# shellcheck source=./lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

wipe=""
for a in "$@"; do
  case "$a" in
    --wipe) wipe=1 ;;
    -h|--help) echo "usage: stack/down.sh [--wipe]"; exit 0 ;;
    *) die "unknown argument: $a (usage: stack/down.sh [--wipe])" ;;
  esac
done

[[ -d "$STATE_DIR" ]] || exit 0
ensure_dirs
take_lock
pg_paths

stop_postgres() {  # sets STOPPED_PID
  local pid="" bin
  if [[ -f "$PG_DATA/postmaster.pid" ]]; then
    pid="$(head -n1 "$PG_DATA/postmaster.pid" | tr -dc '0-9')"
    pid_is "$pid" postgres || pid=""
  fi
  [[ -n "$pid" ]] || pid="$(svc_pid postgres)"
  STOPPED_PID="$pid"
  if [[ -n "$pid" ]]; then
    log "stopping postgres (pid $pid)"
    bin="$(pg_bin)"
    # fast (SIGINT: abort open transactions), then immediate (SIGQUIT), then SIGKILL
    if ! (cd / && as_stack_user "$bin/pg_ctl" -D "$PG_DATA" -s -m fast -w -t 30 stop) \
        >>"$LOG_DIR/postgres.log" 2>&1 9>&-; then
      (cd / && as_stack_user "$bin/pg_ctl" -D "$PG_DATA" -s -m immediate -w -t 10 stop) \
        >>"$LOG_DIR/postgres.log" 2>&1 9>&- || stop_pid postgres "$pid" 5
    fi
  fi
  rm -f "$(pidfile postgres)"
}

rc=0
for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
  svc="${SERVICES[$i]}"
  STOPPED_PID=""
  case "$svc" in
    postgres) stop_postgres ;;
    *)
      STOPPED_PID="$(svc_pid "$svc")"
      if [[ -n "$STOPPED_PID" ]]; then
        log "stopping $svc (pid $STOPPED_PID)"
        timeout_s=15
        [[ "$svc" == kafka ]] && timeout_s=60   # controlled shutdown flushes logs
        stop_pid "$svc" "$STOPPED_PID" "$timeout_s"
      fi
      rm -f "$(pidfile "$svc")"
      ;;
  esac
  rm -f "$RUN_DIR/$svc.skip"
  if [[ -n "$STOPPED_PID" ]] && pid_is "$STOPPED_PID" "$svc"; then
    warn "$svc (pid $STOPPED_PID) is still running"
    rc=1
  fi
done

if [[ -n "$wipe" ]]; then
  ((rc == 0)) || die "not wiping data: some services are still running"
  rm -rf "$PG_DATA" "$PG_SOCK" "$DATA_DIR"
  [[ -d "$PG_RELOCATED_BASE" ]] && rm -rf "$PG_RELOCATED_BASE"
fi
exit "$rc"
