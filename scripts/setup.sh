#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: a virtualenv with Engram and the given extras.
#   scripts/setup.sh local            -> what `engram serve` needs
#   scripts/setup.sh deploy           -> what `npx cdk deploy` needs (AWS + CDK extras, the pinned CDK CLI)
#   scripts/setup.sh test             -> everything the test suite needs (Python extras, CDK CLI, browser,
#                                        the coding clients of tests/clients)
# ENGRAM_SETUP_DRY_RUN=1 prints the steps without running them.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-local}"
PYTHON="${PYTHON:-python3}"
VENV="${ENGRAM_VENV:-.venv}"

case "$MODE" in
  local)  EXTRAS="local" ;;
  deploy) EXTRAS="aws,infra" ;;
  test)   EXTRAS="dev,local,aws,infra,browser" ;;
  *) echo "usage: scripts/setup.sh [local|deploy|test]" >&2; exit 2 ;;
esac

run() {
  echo "+ $*"
  if [ -z "${ENGRAM_SETUP_DRY_RUN:-}" ]; then "$@"; fi
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtualenv $VENV"
  run "$PYTHON" -m venv "$VENV"
fi

# Reinstall only when pyproject.toml changed since the last install of these extras.
STAMP="$VENV/.engram-$MODE.stamp"
WANT="$(sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml)"
WANT="$(echo "$WANT" | cut -c1-16)-$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "==> installing Engram with extras [$EXTRAS]"
  run "$VENV/bin/python" -m pip install --quiet --upgrade pip
  run "$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
  if [ -z "${ENGRAM_SETUP_DRY_RUN:-}" ]; then echo "$WANT" > "$STAMP"; fi
fi

if [ "$MODE" = "deploy" ] || [ "$MODE" = "test" ]; then
  if [ ! -x node_modules/.bin/cdk ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    echo "==> installing the CDK CLI (npm ci)"
    run npm ci --no-audit --no-fund --loglevel=error
  fi
fi

# The real coding clients the compatibility suite runs (tests/clients/, README "Coding clients"): test
# mode only, never deploy. Their native binaries come as optional per-platform packages in the lock file.
if [ "$MODE" = "test" ]; then
  CLIENTS=tests/clients
  if [ ! -x "$CLIENTS/node_modules/.bin/claude" ] || [ ! -x "$CLIENTS/node_modules/.bin/codex" ] \
     || [ "$CLIENTS/package-lock.json" -nt "$CLIENTS/node_modules/.package-lock.json" ]; then
    echo "==> installing the coding clients the compatibility suite runs (npm ci in $CLIENTS)"
    run npm ci --prefix "$CLIENTS" --no-audit --no-fund --loglevel=error
  fi
fi

# Only the admin panel's browser tests need Chromium; the script skips (with a message) where it
# cannot install it, and those tests are then skipped.
if [ "$MODE" = "test" ]; then
  run scripts/install-browser.sh
  # The faked-time runs (scripts/test-at-fixed-times.sh) need Debian's faketime; skipped likewise.
  run scripts/install-faketime.sh
fi
