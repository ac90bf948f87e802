#!/bin/sh
# Headless Chromium for the admin panel's browser tests (tests marked `browser`).
# The tests drive this system browser with Playwright's Python package; Playwright's own browser
# download is never used. Run as root (CI image) or with sudo.
set -eu
if [ -x /usr/bin/chromium ]; then
  /usr/bin/chromium --version
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-liberation
/usr/bin/chromium --version
