"""What a Lambda asset's bytecode must be (layers/build.py ``add_bytecode``): checked by the synth and layer
tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from layers.build import NO_BYTECODE, PYTHON_VERSION, RUNTIME_MAGIC, bytecode_tag, runtime_python

TAG = f"cpython-{PYTHON_VERSION.replace('.', '')}"
# Run by the runtime's interpreter: each .pyc's hash is that of its source, and its code object loads.
_VERIFY = """
import importlib.util, json, marshal, sys
bad = []
for source, pyc in json.load(sys.stdin):
    data = open(pyc, "rb").read()
    if data[8:16] != importlib.util.source_hash(open(source, "rb").read()):
        bad.append(source + ": its .pyc is of another source")
    else:
        marshal.loads(data[16:])
print(json.dumps(bad))
"""


def bytecode_problems(root: Path) -> list[str]:
    """What is wrong with the bytecode under ``root`` for the Lambda runtime (empty: nothing).

    On a machine with the runtime's interpreter, every module has ``__pycache__/<name>.cpython-312.pyc``
    carrying the runtime's magic number and the unchecked-hash flag (PEP 552), hashed from that very
    source and loadable by the runtime; on a machine without one, nothing may claim to be bytecode.
    """
    sources = sorted(root.rglob("*.py"))
    pycs = sorted(root.rglob("*.pyc"))
    if bytecode_tag() == NO_BYTECODE:
        return [f"{p.relative_to(root)}: bytecode, though this machine cannot compile for the runtime" for p in pycs]
    magic = RUNTIME_MAGIC[PYTHON_VERSION].to_bytes(2, "little") + b"\r\n"
    problems, pairs = [], []
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.{TAG}.pyc"
        if not pyc.is_file():
            problems.append(f"{source.relative_to(root)}: no {pyc.name}")
            continue
        header = pyc.read_bytes()[:8]
        if header[:4] != magic or int.from_bytes(header[4:8], "little") != 0b01:
            problems.append(f"{pyc.relative_to(root)}: header {header.hex()}, not {TAG} unchecked-hash")
        pairs.append((str(source), str(pyc)))
    extra = set(pycs) - {Path(pyc) for _, pyc in pairs}
    problems += [f"{p.relative_to(root)}: a .pyc of no shipped source" for p in sorted(extra)]
    python = runtime_python()
    assert python is not None
    verified = subprocess.run(
        [python, "-I", "-c", _VERIFY], input=json.dumps(pairs), capture_output=True, text=True, check=True
    )
    return problems + list(json.loads(verified.stdout))
