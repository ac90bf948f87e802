#!/bin/sh
# Debian's `faketime` (libfaketime) for the faked-time test runs (scripts/test-at-fixed-times.sh).
# Installs with apt-get as root (the CI image) or with password-less sudo; anywhere else it says so
# and exits 0: the faked-time runs are then skipped with a message.
# ENGRAM_REQUIRE_FAKETIME=1 turns "cannot install" into an error (CI sets it).
set -eu
if command -v faketime >/dev/null 2>&1; then
  exit 0
fi

STEP=install-faketime PACKAGE=faketime REQUIRED="${ENGRAM_REQUIRE_FAKETIME:-}"
SKIPPED="the faked-time test runs will be skipped (apt-get install faketime to run them)"
. "${0%/*}/apt-common.sh"
apt_rights

# The package lists may be missing or old on a fresh machine: install, and update once if that fails.
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends faketime; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update || cannot "apt-get update failed"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends faketime \
    || cannot "apt-get install faketime failed"
fi
command -v faketime >/dev/null 2>&1 || cannot "faketime is still not on PATH after installing it"
