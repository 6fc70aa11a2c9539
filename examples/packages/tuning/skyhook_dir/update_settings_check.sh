#!/bin/sh
# config-check: every configmap key is rendered, with the same settings.
set -eu
. "$(dirname "$0")/common.sh"
same() { # <configmap key> <drop-in>
    [ -f "$CM/$1" ] || return 0
    [ -f "$2" ] || { log "missing $2"; return 1; }
    [ "$(settings "$CM/$1")" = "$(settings "$2")" ] || { log "$2 differs from $1"; return 1; }
}
same sysctl.conf "$SYSCTL_DROPIN"
same ulimit.conf "$LIMITS_DROPIN"
same grub.conf "$GRUB_DROPIN"
test -f "$STATE/configured_at"
