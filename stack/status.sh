#!/usr/bin/env bash
# One line per service: name, address, up/down (or skipped). Exits 1 if any is down.
set -euo pipefail
# shellcheck source=./lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rc=0
for svc in "${SERVICES[@]}"; do
  addr="$(service_addr "$svc")"
  if [[ -f "$RUN_DIR/$svc.skip" ]] && [[ -z "$(svc_pid "$svc")" ]]; then
    state="skipped ($(head -n1 "$RUN_DIR/$svc.skip"))"
  elif probe "$svc"; then
    pid="$(svc_pid "$svc")"
    if [[ -n "$pid" ]]; then state="up"; else state="up (not started by this stack?)"; fi
  else
    state="down"
    rc=1
  fi
  printf '%-16s %-44s %s\n' "$svc" "$addr" "$state"
done
exit "$rc"
