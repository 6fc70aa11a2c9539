#!/bin/sh
set -eu
. "$(dirname "$0")/common.sh"
[ ! -e "$SYSCTL_DROPIN" ] && [ ! -e "$LIMITS_DROPIN" ] && [ ! -e "$GRUB_DROPIN" ] && [ ! -e "$STATE" ]
