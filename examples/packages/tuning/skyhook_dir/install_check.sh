#!/bin/sh
set -eu
. "$(dirname "$0")/common.sh"
grep -q '^installed_version=1.2.0$' "$STATE/installed"
