#!/bin/sh
# apply: prepare the state directory. Auto-idempotent (idempotence: false), so the agent runs
# it once per version and skips it afterwards thanks to its flag.
set -eu
. "$(dirname "$0")/common.sh"
mkdir -p "$STATE" "$HOST/etc/sysctl.d" "$HOST/etc/security/limits.d"
echo "installed_version=1.2.0" > "$STATE/installed"
log "installed state in $STATE"
