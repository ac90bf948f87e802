#!/bin/sh
# Headless Chromium for the admin panel's browser tests (tests marked `browser`).
# The tests drive this system browser with Playwright's Python package; Playwright's own browser
# download is never used. Installs with apt-get as root (the CI image) or with password-less sudo;
# anywhere else (macOS, no root) it says so and exits 0: the browser tests are then skipped.
# ENGRAM_REQUIRE_BROWSER=1 turns "cannot install" into an error (for CI).
set -eu
CHROMIUM="${ENGRAM_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  "$CHROMIUM" --version
  exit 0
fi

STEP=install-browser PACKAGE=Chromium REQUIRED="${ENGRAM_REQUIRE_BROWSER:-}"
SKIPPED="the admin panel's browser tests will be skipped (install Chromium at $CHROMIUM to run them)"
. "${0%/*}/apt-common.sh"
apt_rights

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation
"$CHROMIUM" --version
