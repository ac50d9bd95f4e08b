"""A full disk under the run folder: the run stops with one line saying so, run.json says
`interrupted`, and once space is freed `--resume` finishes it.

The disk is a small tmpfs mounted in a private mount namespace (`unshare`), so the test
needs no root and leaves nothing mounted; the shell script in that namespace runs flowkit as
a user would and copies what the test checks out of the tmpfs before it goes away.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, python_flow, read_json, write_jsonl

SCRIPT = """
set -u
mount -t tmpfs -o size=4m tmpfs disk || exit 99
head -c 4000000 /dev/zero > disk/filler
flowkit() { "$PY" -m flowkit.cli "$@"; }
flowkit run t.yaml --data d.jsonl --no-cache -q --output disk/r > out1 2> err1; echo $? > code1
cp disk/r/run.json run1.json
rm disk/filler
flowkit run --resume disk/r -q > out2 2> err2; echo $? > code2
cp disk/r/run.json run2.json
wc -l < disk/r/outputs.jsonl > lines2
"""


def test_a_full_disk_interrupts_the_run_and_says_so(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a small disk")
    python_flow(
        tmp_path,
        "def f(x):\n    return x\n\ndef total(ys):\n    return {'sum': sum(ys)}\n",
        "total",
    )
    rows = 3000
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(rows)])
    (tmp_path / "disk").mkdir()
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PY": sys.executable}
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", SCRIPT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode == 99 or not (tmp_path / "code1").exists():
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {proc.stderr.strip()}")

    def text(name: str) -> str:
        return (tmp_path / name).read_text()

    assert text("code1").strip() == "1"
    assert text("err1") == (
        "error: no space left on the device holding run folder 'disk/r': the run stopped and "
        "is marked interrupted; the rows written before are kept\n"
        "  hint: free some space, then finish it with `flowkit run --resume disk/r`\n"
    )
    first = read_json(tmp_path / "run1.json")
    assert first["status"] == "interrupted"
    assert 0 < first["counts"]["rows"] < rows
    assert text("code2").strip() == "0", text("err2")
    second = read_json(tmp_path / "run2.json")
    assert second["status"] == "completed"
    assert second["counts"]["succeeded"] == rows
    assert int(text("lines2")) == rows
