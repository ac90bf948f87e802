"""scripts/setup.sh and scripts/install-browser.sh: what each mode installs, and the browser step
skipping (not failing) where it cannot apt-get install. Fake `id`, `apt-get` and `sudo` on PATH stand
in for the machine; nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_BROWSER = ROOT / "scripts" / "install-browser.sh"
SETUP = ROOT / "scripts" / "setup.sh"


def _bin(tmp_path: Path, **scripts: str) -> Path:
    """A PATH directory with the basic tools the scripts use plus the given fake commands."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("sh", "cat", "chmod", "env"):
        real = next((Path(d) / tool for d in ("/usr/bin", "/bin") if (Path(d) / tool).exists()), None)
        if real and not (bindir / tool).exists():
            (bindir / tool).symlink_to(real)
    for name, body in scripts.items():
        path = bindir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
    return bindir


def _install_browser(tmp_path: Path, bindir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": str(bindir), "ENGRAM_CHROMIUM": str(tmp_path / "chromium"), **env}
    return subprocess.run(["/bin/sh", str(INSTALL_BROWSER)], env=full, capture_output=True, text=True, timeout=30)


def _fake_apt(tmp_path: Path) -> str:
    # Records its arguments; "install" puts a fake browser where the script looks for it.
    log, browser = tmp_path / "apt.log", tmp_path / "chromium"
    return (
        f'echo "$@" >> {log}\n'
        f'case "$1" in install) printf "#!/bin/sh\\necho Chromium 1.0\\n" > {browser}; chmod +x {browser};; esac'
    )


def test_browser_step_skips_without_apt_get(tmp_path: Path) -> None:
    # Given a machine without apt-get (macOS) and no browser
    bindir = _bin(tmp_path, id="echo 501")
    # When the browser step runs / Then it explains and succeeds, so `setup.sh test` goes on
    result = _install_browser(tmp_path, bindir)
    assert result.returncode == 0, result.stderr
    assert "no apt-get" in result.stderr and "browser tests will be skipped" in result.stderr


def test_browser_step_skips_for_a_non_root_user_without_sudo(tmp_path: Path) -> None:
    # Given Debian, but a normal user whose sudo asks for a password
    bindir = _bin(tmp_path, id="echo 1000", sudo="exit 1", **{"apt-get": _fake_apt(tmp_path)})
    # When the browser step runs / Then it does not try apt-get and says how to install
    result = _install_browser(tmp_path, bindir)
    assert result.returncode == 0, result.stderr
    assert "needs root" in result.stderr and "sudo scripts/install-browser.sh" in result.stderr
    assert not (tmp_path / "apt.log").exists()


def test_browser_step_fails_when_required(tmp_path: Path) -> None:
    # Given CI asks for the browser (ENGRAM_REQUIRE_BROWSER=1) on a machine that cannot install it
    bindir = _bin(tmp_path, id="echo 1000")
    # Then the step fails instead of skipping
    result = _install_browser(tmp_path, bindir, ENGRAM_REQUIRE_BROWSER="1")
    assert result.returncode == 1 and "no apt-get" in result.stderr


def test_browser_step_installs_as_root(tmp_path: Path) -> None:
    # Given root on Debian (the CI image)
    bindir = _bin(tmp_path, id="echo 0", **{"apt-get": _fake_apt(tmp_path)})
    # When the browser step runs / Then it installs Chromium with apt-get and prints its version
    result = _install_browser(tmp_path, bindir)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls[0] == "update" and calls[1].startswith("install -y --no-install-recommends chromium")
    assert "Chromium 1.0" in result.stdout


def _setup(mode: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENGRAM_SETUP_DRY_RUN": "1", "ENGRAM_VENV": str(tmp_path / "venv")}
    return subprocess.run(["bash", str(SETUP), mode], env=env, capture_output=True, text=True, timeout=30, cwd=ROOT)


def test_setup_deploy_installs_aws_and_infra_and_the_cdk_cli_but_no_browser(tmp_path: Path) -> None:
    # When `scripts/setup.sh deploy` runs (dry run: steps printed, nothing installed)
    result = _setup("deploy", tmp_path)
    assert result.returncode == 0, result.stderr
    steps = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    # Then it installs the aws and infra extras; the CDK CLI only when node_modules lacks it
    assert any(line.endswith("-e .[aws,infra]") for line in steps), steps
    assert not any("install-browser" in line or "browser" in line.split("[")[-1] for line in steps)
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize(("mode", "extras"), [("local", "local"), ("test", "dev,local,aws,infra,browser")])
def test_setup_modes(mode: str, extras: str, tmp_path: Path) -> None:
    result = _setup(mode, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"-e .[{extras}]" in result.stdout
    assert ("install-browser.sh" in result.stdout) == (mode == "test")


def test_setup_rejects_an_unknown_mode(tmp_path: Path) -> None:
    result = _setup("prod", tmp_path)
    assert result.returncode == 2 and "local|deploy|test" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_deploy_docs_use_the_deploy_mode() -> None:
    # Deploying needs no browser and no test extras: README and docs/aws.md point at `setup.sh deploy`
    for doc in (ROOT / "README.md", ROOT / "docs" / "aws.md"):
        text = doc.read_text()
        assert "scripts/setup.sh deploy" in text, doc


# -- faketime: the faked-time test runs (scripts/install-faketime.sh, scripts/test-at-fixed-times.sh) --
INSTALL_FAKETIME = ROOT / "scripts" / "install-faketime.sh"
FIXED_TIMES = ROOT / "scripts" / "test-at-fixed-times.sh"


def _install_faketime(bindir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": str(bindir), **env}
    return subprocess.run(["/bin/sh", str(INSTALL_FAKETIME)], env=full, capture_output=True, text=True, timeout=30)


def test_faketime_step_skips_without_apt_get_and_fails_when_required(tmp_path: Path) -> None:
    # Given a machine without apt-get and without faketime
    bindir = _bin(tmp_path, id="echo 501")
    # When the step runs / Then it explains and succeeds, unless CI requires faketime
    result = _install_faketime(bindir)
    assert result.returncode == 0 and "faked-time test runs will be skipped" in result.stderr
    assert _install_faketime(bindir, ENGRAM_REQUIRE_FAKETIME="1").returncode == 1


def test_faketime_step_installs_as_root_and_updates_the_lists_when_needed(tmp_path: Path) -> None:
    # Given root on Debian whose package lists are missing (the first install fails until an update)
    log, tool = tmp_path / "apt.log", tmp_path / "bin" / "faketime"
    apt = (
        f'echo "$@" >> {log}\n'
        f'case "$1" in update) : > {tmp_path}/updated;; install) [ -f {tmp_path}/updated ] || exit 100;\n'
        f'  printf "#!/bin/sh\\n" > {tool}; chmod +x {tool};; esac'
    )
    bindir = _bin(tmp_path, id="echo 0", **{"apt-get": apt})
    # When the step runs / Then it installs faketime, running apt-get update once in between
    result = _install_faketime(bindir, ENGRAM_REQUIRE_FAKETIME="1")
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["install", "update", "install"]
    assert calls[-1] == "install -y --no-install-recommends faketime"


def _fixed_times(tmp_path: Path, pytest_exit: int, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The fixed-times script with a stand-in `faketime` (runs the command, recording the moment's
    environment) and a stand-in venv Python (answers the libfaketime probe, exits ``pytest_exit``)."""
    log = tmp_path / "runs.log"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-c" ]; then echo "2026-12-31 23:30 2027-01-01 00:30 CET"; exit 0; fi\n'
        f'echo "$TZ $ENGRAM_TIMEZONE $*" >> {log}\n'
        f"exit {pytest_exit}\n"
    )
    python.chmod(0o755)
    bindir = _bin(tmp_path, faketime='[ "$1" = "-f" ] && shift 2; exec "$@"')
    path = f"{bindir}:/usr/bin:/bin"
    full = {"PATH": path, "ENGRAM_VENV": str(venv), **env}
    return subprocess.run(["bash", str(FIXED_TIMES), *args], env=full, capture_output=True, text=True, timeout=60)


def test_fixed_times_run_the_unit_and_contract_suites_once_per_moment(tmp_path: Path) -> None:
    result = _fixed_times(tmp_path, 0)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = (tmp_path / "runs.log").read_text().splitlines()
    # Four moments, each in its zone, the unit and contract suites
    assert [r.split()[:2] for r in runs] == [
        ["UTC", "UTC"],
        ["UTC", "UTC"],
        ["Europe/Berlin", "Europe/Berlin"],
        ["America/New_York", "America/New_York"],
    ]
    assert all("-m pytest tests/unit tests/contract -m not slow and not aws" in r for r in runs)
    assert result.stdout.count(": passed in ") == 4


@pytest.mark.parametrize(("pytest_exit", "reason"), [(1, "pytest exit 1"), (5, "no tests collected")])
def test_a_failing_or_empty_faked_run_fails_the_script(tmp_path: Path, pytest_exit: int, reason: str) -> None:
    result = _fixed_times(tmp_path, pytest_exit, "2")
    assert result.returncode == 1 and f"FAILED ({reason})" in result.stdout
    assert len((tmp_path / "runs.log").read_text().splitlines()) == 1  # only the moment asked for


def test_without_faketime_the_runs_are_skipped_loudly_but_ci_fails(tmp_path: Path) -> None:
    # Given a PATH without faketime (only what the script needs before it looks for it)
    bindir = _bin(tmp_path)
    (bindir / "dirname").symlink_to(
        next(Path(d) / "dirname" for d in ("/usr/bin", "/bin") if (Path(d) / "dirname").exists())
    )
    env = {"PATH": str(bindir), "ENGRAM_VENV": str(tmp_path / "venv")}
    run = ["/bin/bash", str(FIXED_TIMES)]
    # When it runs on a developer's machine / Then it skips with a loud message
    skipped = subprocess.run(run, env=env, capture_output=True, text=True, timeout=30)
    assert skipped.returncode == 0 and "faked-time runs SKIPPED" in skipped.stderr
    # When it runs on CI / Then it fails
    on_ci = subprocess.run(run, env={**env, "CI": "true"}, capture_output=True, text=True, timeout=30)
    assert on_ci.returncode == 1 and "CI needs it" in on_ci.stderr


def test_only_the_test_setup_installs_the_coding_clients(tmp_path: Path) -> None:
    # The real CLIs of tests/clients are test tools: the deploy and local set-ups never install them
    for mode in ("deploy", "local"):
        result = _setup(mode, tmp_path)
        assert result.returncode == 0, result.stderr
        assert "tests/clients" not in result.stdout
    script = SETUP.read_text()
    assert 'if [ "$MODE" = "test" ]; then\n  CLIENTS=tests/clients' in script
    assert 'npm ci --prefix "$CLIENTS"' in script
