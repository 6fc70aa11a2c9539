#!/bin/sh
set -eu
. "$(dirname "$0")/common.sh"
test -f "$STATE/active"
if [ -f "$SYSCTL_DROPIN" ]; then
    [ "$(settings "$SYSCTL_DROPIN")" = "$(cat "$STATE/active")" ]
fi
