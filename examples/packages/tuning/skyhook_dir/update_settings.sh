#!/bin/sh
# config: render the configmaps into host drop-ins. Runs on every config stage (configmap
# change), so it rewrites everything and removes drop-ins whose configmap key disappeared.
set -eu
. "$(dirname "$0")/common.sh"
mkdir -p "$STATE"
render() { # <configmap key> <drop-in>
    if [ -f "$CM/$1" ]; then
        mkdir -p "$(dirname "$2")"
        { echo "# managed by nodewright package $NAME from configmap key $1"; settings "$CM/$1"; } > "$2"
        log "wrote $2"
    elif [ -f "$2" ]; then
        rm -f "$2"
        log "removed $2 (no $1 configmap)"
    fi
}
render sysctl.conf "$SYSCTL_DROPIN"
render ulimit.conf "$LIMITS_DROPIN"
render grub.conf "$GRUB_DROPIN"
# service_<name>.conf → systemd drop-in for <name>.
for f in "$CM"/service_*.conf; do
    [ -f "$f" ] || continue
    svc="$(basename "$f" .conf)"; svc="${svc#service_}"
    render "service_$svc.conf" "$HOST/etc/systemd/system/$svc.service.d/$PRIO-$NAME.conf"
done
date -u +%Y-%m-%dT%H:%M:%SZ > "$STATE/configured_at"
