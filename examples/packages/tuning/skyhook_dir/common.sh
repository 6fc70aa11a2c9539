# Shared helpers, sourced by the steps (not a step).
#
# HOST prefixes host paths: empty when the agent runs steps through chroot (production), the
# sandbox root when it runs them without chroot (NODEWRIGHT_AGENT_NO_CHROOT=1, simulator/tests).
HOST="${NODEWRIGHT_HOST_ROOT:-}"
# The drop-in name comes from the package's CR key: field 2 of SKYHOOK_RESOURCE_ID
# (<nodewright>-<uid>-<generation>_<package>_<version>), like the upstream tuning package.
NAME="$(echo "${SKYHOOK_RESOURCE_ID:-x_tuning_0}" | cut -d _ -f 2)"
PRIO="${TUNING_DROPIN_PRIORITY:-99}"
STATE="$HOST/var/lib/nodewright-tuning/$NAME"
SYSCTL_DROPIN="$HOST/etc/sysctl.d/$PRIO-$NAME.conf"
LIMITS_DROPIN="$HOST/etc/security/limits.d/$PRIO-$NAME.conf"
GRUB_DROPIN="$HOST/etc/default/grub.d/$PRIO-$NAME.cfg"
CM="$SKYHOOK_DIR/configmaps"

log() { echo "tuning[$NAME]: $*"; }

# Strip comments and blank lines so checks compare only settings.
settings() { grep -v '^[[:space:]]*#' "$1" | grep -v '^[[:space:]]*$' || true; }
