#!/bin/sh
# post-interrupt: after the interrupt (restartAllServices reloads sysctl, a reboot applies grub),
# record which settings are now active.
set -eu
. "$(dirname "$0")/common.sh"
mkdir -p "$STATE"
if [ -f "$SYSCTL_DROPIN" ]; then settings "$SYSCTL_DROPIN" > "$STATE/active"; else : > "$STATE/active"; fi
log "activated $(wc -l < "$STATE/active" | tr -d ' ') settings"
