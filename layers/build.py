#!/usr/bin/env python3
"""Build the Lambda dependency layer without Docker.

pip downloads manylinux wheels for the Lambda platform (never compiles), so this runs on any OS:

    python layers/build.py                 # -> layers/build/python/...
    python layers/build.py --arch arm64    # for arm64 functions

The CDK stack calls this when ``layers/build/python`` is missing; CI may run it first.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}


def build(
    out: Path, *, arch: str = "x86_64", python_version: str = "3.12", requirements: Path = HERE / "requirements.txt"
) -> Path:
    target = out / "python"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "pip", "install",
        "--platform", PLATFORMS[arch],
        "--only-binary=:all:",
        "--python-version", python_version,
        "--implementation", "cp",
        "--target", str(target),
        "--no-compile",
        "--disable-pip-version-check",
        "--quiet",
        "-r", str(requirements),
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    for cache in target.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "build", help="layer root (default: layers/build)")
    parser.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument(
        "--requirements",
        type=Path,
        default=HERE / "requirements.txt",
        help="requirements file (requirements-replica.txt: the replica search backend's layer)",
    )
    args = parser.parse_args()
    target = build(args.out, arch=args.arch, python_version=args.python_version, requirements=args.requirements)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"layer built in {target} ({size / 1e6:.0f} MB unzipped)")


if __name__ == "__main__":
    main()
