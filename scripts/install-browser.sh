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

cannot() {
  echo "install-browser: $1." >&2
  if [ -n "${ENGRAM_REQUIRE_BROWSER:-}" ]; then
    exit 1
  fi
  echo "install-browser: skipped; the admin panel's browser tests will be skipped (install Chromium at $CHROMIUM to run them)." >&2
  exit 0
}

command -v apt-get >/dev/null 2>&1 || cannot "no apt-get here (not Debian/Ubuntu)"
if [ "$(id -u)" = "0" ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo -n"
else
  cannot "installing Chromium with apt-get needs root (run: sudo scripts/install-browser.sh)"
fi

$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation
"$CHROMIUM" --version
