"""Reproducible layers (issue #22 item 6): built for the wheels the Lambda runtime loads, from hashed
locks, rebuilt when a lock changes, and holding exactly what the lock pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

import layers.build
from infra.functions import built_code
from infra.layer import ensure_layer_built
from layers.build import (
    NO_BYTECODE,
    PYTHON_VERSION,
    add_bytecode,
    bytecode_tag,
    differences,
    installed_versions,
    is_built_from,
    lock_is_current,
    lock_path,
    platform_tags,
    read_lock,
    stamp,
)
from tests.bytecode import TAG, bytecode_problems

LAYERS = Path(__file__).resolve().parents[2] / "layers"
REQUIREMENTS = sorted(LAYERS.glob("requirements*.txt"))
RUNTIME_ABI = f"cp{PYTHON_VERSION.replace('.', '')}"


def _wheels(lock: Path) -> list[str]:
    """The wheel file names the lock's comments name (one comment line per package)."""
    return re.findall(r"[\w.+-]+\.whl", lock.read_text())


def test_the_platform_tags_are_the_ones_amazon_linux_2023_loads() -> None:
    # Given python3.12 on Amazon Linux 2023 (glibc 2.34) / Then every manylinux level up to 2_34 is allowed,
    # newest first, and nothing newer (a manylinux_2_35 wheel would not load)
    tags = platform_tags("x86_64")
    assert tags[0] == "manylinux_2_34_x86_64" and tags[-1] == "manylinux2014_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64"} <= set(tags)
    assert not any(t.startswith(("manylinux_2_35", "manylinux_2_4", "musllinux")) for t in tags)
    assert all(t.endswith("aarch64") for t in platform_tags("arm64"))


@pytest.mark.parametrize("requirements", REQUIREMENTS, ids=lambda p: p.name)
def test_each_layer_has_a_current_hashed_lock_of_wheels_the_runtime_loads(requirements: Path) -> None:
    # Given a layer's requirements and its lock
    lock = lock_path(requirements)
    pins = read_lock(lock)
    # Then the lock was resolved from this very requirements file (a changed .txt needs --lock again)
    assert lock_is_current(requirements), f"run python layers/build.py --lock ({lock.name} is stale)"
    # And every requirement is pinned at a version its range allows
    for line in requirements.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            wanted = Requirement(line)
            name = canonicalize_name(wanted.name)
            assert name in pins and wanted.specifier.contains(pins[name], prereleases=True), (line, pins.get(name))
    # And each pin carries a hash per wheel, one wheel per architecture unless it is pure Python
    text = lock.read_text()
    for pinned in pins:
        block = re.search(rf"^{re.escape(pinned)}==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{{64}}.*\n)+)", text, re.M)
        assert block, f"{pinned} has no hash in {lock.name}"
    wheels = [parse_wheel_filename(w) for w in _wheels(lock)]
    assert {canonicalize_name(w[0]) for w in wheels} == set(pins)
    assert text.count("--hash=sha256:") == len(wheels)
    # And each wheel is one python3.12 on Lambda loads: cp312 / abi3 / pure, on an allowed platform
    allowed = {*platform_tags("x86_64"), *platform_tags("arm64"), "any"}
    for name, version, _, tags in wheels:
        assert str(version) == pins[canonicalize_name(name)]
        assert any(t.platform in allowed and t.interpreter in (RUNTIME_ABI, "cp311", "py3", "py2.py3") for t in tags), (
            name,
            tags,
        )


def test_numpy_is_the_one_its_range_asks_for_not_an_older_manylinux2014_build() -> None:
    # Given numpy 2.4 and later publish manylinux_2_27/2_28 wheels only / Then the replica layer's lock
    # pins such a numpy (a manylinux2014-only build fell back to 2.2) and names its manylinux_2_28 wheel
    lock = lock_path(LAYERS / "requirements-replica.txt")
    major, minor = (int(x) for x in read_lock(lock)["numpy"].split(".")[:2])
    assert (major, minor) >= (2, 4)
    numpy = [parse_wheel_filename(w)[3] for w in _wheels(lock) if w.startswith("numpy-")]
    assert any(t.platform == "manylinux_2_28_x86_64" for tags in numpy for t in tags)


def _fake_layer(root: Path, packages: dict[str, str]) -> Path:
    """A layer directory whose python/ holds ``.dist-info`` metadata of ``packages`` (name -> version)."""
    target = root / "python"
    target.mkdir(parents=True, exist_ok=True)
    for name, version in packages.items():
        info = target / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody: text\n")
    return target


def _lock(root: Path, pins: dict[str, str]) -> Path:
    requirements = root / "requirements-test.txt"
    requirements.write_text("".join(f"{name}\n" for name in pins))
    lock = lock_path(requirements)
    lock.write_text("".join(f"{name}=={version} \\\n    --hash=sha256:{'0' * 64}\n" for name, version in pins.items()))
    return requirements


def test_the_installed_versions_are_checked_against_the_lock(tmp_path: Path) -> None:
    # Given a lock of numpy 2.5.5 and typing-extensions
    lock = lock_path(_lock(tmp_path, {"numpy": "2.5.5", "typing-extensions": "4.16.0"}))
    # When the layer holds exactly that / Then nothing differs (names compared canonically)
    exact = _fake_layer(tmp_path / "exact", {"numpy": "2.5.5", "typing_extensions": "4.16.0"})
    assert installed_versions(exact) == {"numpy": "2.5.5", "typing-extensions": "4.16.0"}
    assert differences(exact, lock) == []
    # When it holds an older numpy, misses a pin and has something unlocked / Then each is named
    wrong = _fake_layer(tmp_path / "wrong", {"numpy": "2.2.6", "six": "1.17.0"})
    assert differences(wrong, lock) == [
        "numpy: lock 2.5.5, installed 2.2.6",
        "typing-extensions: lock 4.16.0, installed nothing",
        "six: installed 1.17.0, not in the lock",
    ]


def test_a_layer_is_rebuilt_when_its_lock_changes(tmp_path: Path) -> None:
    requirements = _lock(tmp_path, {"numpy": "2.5.5"})
    lock = lock_path(requirements)
    builds: list[Path] = []

    def build(layer_dir: Path, source: Path) -> None:  # what layers/build.py leaves: python/ and the stamp
        builds.append(source)
        shutil.rmtree(layer_dir, ignore_errors=True)
        _fake_layer(layer_dir, read_lock(lock_path(source)))
        stamp(layer_dir, lock_path(source))

    layer = tmp_path / "build"
    # Given no layer yet / When synth needs it / Then it is built, from the lock
    ensure_layer_built(layer, requirements, build=build)
    assert builds == [requirements] and is_built_from(layer, lock)
    # Given the same lock / Then the next synth uses the layer as it is
    ensure_layer_built(layer, requirements, build=build)
    assert len(builds) == 1
    # Given a new pin in the lock / Then the next synth rebuilds, and the layer holds the new pin
    lock.write_text(lock.read_text().replace("2.5.5", "2.5.6"))
    assert not is_built_from(layer, lock)
    ensure_layer_built(layer, requirements, build=build)
    assert len(builds) == 2 and installed_versions(layer / "python") == {"numpy": "2.5.6"}
    # Given a build that does not leave a layer of this lock / Then synth stops instead of deploying it
    lock.write_text(lock.read_text().replace("2.5.6", "2.5.7"))
    with pytest.raises(ValueError, match=r"was not built from requirements-test\.lock"):
        ensure_layer_built(layer, requirements, build=lambda layer_dir, source: None)


def _modules(root: Path) -> Path:
    """A small tree of modules: a package, a module with a set constant, one that does not compile."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from pkg.words import known\n")
    (root / "pkg" / "words.py").write_text("def known(word):\n    return word in {'alpha', 'beta', 'gamma'}\n")
    (root / "broken.py").write_text("def broken(:\n")
    return root


def test_without_the_runtimes_interpreter_nothing_claims_to_be_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a machine with no Python 3.12 / When a layer's folder is compiled
    monkeypatch.setattr(layers.build, "runtime_python", lambda version=PYTHON_VERSION: None)
    root = _modules(tmp_path / "python")
    # Then it ships as it is, says why, and the stamp's tag says so
    assert add_bytecode(root, "/opt/python") == NO_BYTECODE == bytecode_tag()
    assert not list(root.rglob("*.pyc")) and bytecode_problems(root) == []
    assert "every Lambda cold start compiles" in capsys.readouterr().err


@pytest.mark.skipif(layers.build.runtime_python() is None, reason=f"no Python {PYTHON_VERSION} on this machine")
def test_a_folder_is_compiled_for_the_runtime_into_unchecked_hash_pyc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given modules, one of which does not compile / When the folder is compiled for the runtime
    root = _modules(tmp_path / "python")
    assert add_bytecode(root, "/opt/python") == TAG
    # Then every module that compiles has its runtime .pyc (magic, unchecked hash of its source, loadable)
    # and the broken one is named and stays source only
    assert bytecode_problems(root) == [f"broken.py: no broken.{TAG}.pyc"]
    assert "broken.py" in capsys.readouterr().err
    # And tracebacks name where Lambda mounts the layer
    assert b"/opt/python/pkg/words.py" in (root / "pkg" / "__pycache__" / f"words.{TAG}.pyc").read_bytes()
    # And the bytes are the same on a second build (a set constant included): the asset's hash holds
    first = {p: p.read_bytes() for p in root.rglob("*.pyc")}
    for pyc in first:
        pyc.unlink()
    add_bytecode(root, "/opt/python")
    assert {p: p.read_bytes() for p in root.rglob("*.pyc")} == first


def test_a_layer_without_bytecode_is_rebuilt_once_the_machine_can_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = lock_path(_lock(tmp_path, {"numpy": "2.5.5"}))
    layer = tmp_path / "build"
    _fake_layer(layer, {"numpy": "2.5.5"})
    # Given a layer built from its lock on a machine without Python 3.12
    monkeypatch.setattr(layers.build, "runtime_python", lambda version=PYTHON_VERSION: None)
    stamp(layer, lock)
    assert is_built_from(layer, lock)
    # When synth runs where Python 3.12 is / Then the layer is stale: a rebuild ships its .pyc
    monkeypatch.setattr(layers.build, "runtime_python", lambda version=PYTHON_VERSION: "/usr/bin/python3.12")
    assert not is_built_from(layer, lock)
    stamp(layer, lock, TAG)
    assert is_built_from(layer, lock)


def test_the_code_asset_is_built_once_and_again_when_a_source_or_the_bytecode_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "functions"
    _modules(source / "engram")
    (source / "engram" / "broken.py").unlink()
    (source / "run.sh").write_text("#!/bin/bash\n")
    (source / "run.sh").chmod(0o755)
    (source / "engram" / "__pycache__").mkdir()
    (source / "engram" / "__pycache__" / "local.cpython-311.pyc").write_bytes(b"a local cache")
    out = tmp_path / "build" / "functions"
    # Given a machine without Python 3.12 / When the asset is built / Then the sources, no cache, no .pyc
    monkeypatch.setattr(layers.build, "runtime_python", lambda version=PYTHON_VERSION: None)
    assert built_code(out, source) == out
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "engram/pkg/__init__.py",
        "engram/pkg/words.py",
        "run.sh",
    ]
    assert (out / "run.sh").stat().st_mode & 0o111
    # And a second synth reuses it as it is
    (out / "engram" / "marker").write_text("kept")
    built_code(out, source)
    assert (out / "engram" / "marker").is_file()
    # When a source changes / Then it is rebuilt from the sources
    (source / "engram" / "pkg" / "words.py").write_text("known = None\n")
    built_code(out, source)
    assert not (out / "engram" / "marker").exists() and (out / "engram" / "pkg" / "words.py").read_text() == (
        "known = None\n"
    )
    # When the machine can compile for the runtime / Then the next build ships the runtime's .pyc
    monkeypatch.undo()
    if layers.build.runtime_python() is not None:
        built_code(out, source)
        assert bytecode_problems(out) == [] and len(list(out.rglob("*.pyc"))) == 2


@pytest.mark.slow
def test_the_replica_layer_built_from_its_lock_holds_exactly_the_lock(tmp_path: Path) -> None:
    """layers/build.py for real (pip fetches the locked numpy wheel for python3.12 on Lambda, ~17 MB)."""
    requirements = LAYERS / "requirements-replica.txt"
    out = tmp_path / "replica"
    # When the layer is built / Then it holds the lock's versions, from a manylinux_2_28 wheel, stamped
    subprocess.run(
        [sys.executable, str(LAYERS / "build.py"), "--out", str(out), "--requirements", str(requirements)], check=True
    )
    assert differences(out / "python", lock_path(requirements)) == []
    assert installed_versions(out / "python") == read_lock(lock_path(requirements))
    wheel = next((out / "python").glob("numpy-*.dist-info")) / "WHEEL"
    assert "Tag: cp312-cp312-manylinux_2_28_x86_64" in wheel.read_text()
    assert is_built_from(out, lock_path(requirements))
    # And its modules carry the runtime's bytecode when this machine has the runtime's interpreter
    assert bytecode_problems(out / "python") == []
    # And a lock whose hash is not the wheel's stops the build (pip --require-hashes)
    tampered = tmp_path / "requirements-replica.txt"
    tampered.write_text(requirements.read_text())
    text = lock_path(requirements).read_text()
    lock_path(tampered).write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "1" * 64, text))
    run = subprocess.run(
        [sys.executable, str(LAYERS / "build.py"), "--out", str(tmp_path / "bad"), "--requirements", str(tampered)],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "HASH" in run.stderr.upper()
    assert not is_built_from(tmp_path / "bad", lock_path(tampered))
