# Sourced by scripts/install-browser.sh and scripts/install-faketime.sh: how a set-up step that
# installs a Debian package gets apt-get rights, or says why it cannot. The sourcing script sets
# STEP (its name), PACKAGE, REQUIRED (non-empty: "cannot install" is an error, for CI) and SKIPPED
# (what is skipped instead); after `apt_rights`, $SUDO prefixes the apt-get calls.

cannot() {
  echo "$STEP: $1." >&2
  if [ -n "$REQUIRED" ]; then
    exit 1
  fi
  echo "$STEP: skipped; $SKIPPED." >&2
  exit 0
}

apt_rights() {
  command -v apt-get >/dev/null 2>&1 || cannot "no apt-get here (not Debian/Ubuntu)"
  if [ "$(id -u)" = "0" ]; then
    SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    cannot "installing $PACKAGE with apt-get needs root (run: sudo scripts/$STEP.sh)"
  fi
}
