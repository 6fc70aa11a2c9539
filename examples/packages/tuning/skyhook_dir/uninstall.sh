#!/bin/sh
# uninstall: remove every drop-in and the state; safe to re-run.
set -eu
. "$(dirname "$0")/common.sh"
rm -f "$SYSCTL_DROPIN" "$LIMITS_DROPIN" "$GRUB_DROPIN"
rm -f "$HOST"/etc/systemd/system/*.service.d/"$PRIO-$NAME.conf"
rm -rf "$STATE"
log "removed"
