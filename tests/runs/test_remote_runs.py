"""Run folders in an object store, against moto's S3 server on 127.0.0.1: written through a
staging copy, read back by `show` and `compare`, leased there, and resumed from another
machine (another staging folder and host name) after a kill."""

from __future__ import annotations

import json
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.flow.loader import load_flows
from flowkit.runs.lease import LEASE_ENV
from flowkit.runs.remote import STAGING_ENV, RemoteFolder
from tests.runs.test_lease import race
from tests.runs.test_resumption import ROWS, clean_run, comparable
from tests.runs.test_resumption import project as project  # a fixture
from tests.support import read_jsonl, start_flowkit

TTL = 2.0


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3 server on a free local port, with one empty bucket; the runs' URL root."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        STAGING_ENV: str(tmp_path / "staging-here"),
    }.items():
        monkeypatch.setenv(name, value)
    bucket = f"flowkit-runs-{secrets.token_hex(4)}"  # moto's buckets outlive its server
    RemoteFolder(f"s3://{bucket}").fs.mkdir(bucket)
    try:
        yield f"s3://{bucket}/runs"
    finally:
        server.stop()


def stored(url: str) -> dict[str, bytes]:
    folder = RemoteFolder(url)
    return {name: folder.read(name) or b"" for name in folder.names()}


@pytest.mark.slow
def test_a_run_written_to_an_object_store_reads_back_as_a_local_one(project: Path, s3: str) -> None:
    flows = load_flows(["flaky.yaml", "f1_score"])
    local = flowkit.run(flows, "data.jsonl", name="local")
    runner = CliRunner()

    made = runner.invoke(main, ["run", "flaky.yaml", "f1_score", "--data", "data.jsonl",
                                "--output", f"{s3}/a", "-q"])  # fmt: skip
    assert made.exit_code == 0, made.output
    flowkit.run(flows, "data.jsonl", runs_root=s3, name="b")

    files = stored(f"{s3}/a")
    assert {"run.json", "outputs.jsonl", "traces.jsonl", "metrics.json"} <= set(files)
    assert "lease-000001.json" in files and ".flowkit.lock" not in files
    info = json.loads(files["run.json"])
    assert (info["status"], info["location"]) == ("completed", f"{s3}/a")
    assert json.loads(files["lease-000001.json"])["released"] is True
    assert json.loads(files["metrics.json"]) == local.metrics
    assert [json.loads(x) for x in files["outputs.jsonl"].splitlines()] == read_jsonl(
        local.run_dir / "outputs.jsonl"
    )
    shown = runner.invoke(main, ["show", f"{s3}/a"])
    assert shown.exit_code == 0, shown.output
    assert "status   completed" in shown.stdout
    assert f"rows {ROWS}, succeeded {ROWS}, failed 0" in shown.stdout
    by_name = runner.invoke(main, ["show", "b", "--runs-dir", s3])
    assert by_name.exit_code == 0, by_name.output
    compared = runner.invoke(main, ["compare", f"{s3}/a", "b", "--runs-dir", s3])
    assert compared.exit_code == 0, compared.output
    assert "a" in compared.stdout and "b" in compared.stdout

    again = runner.invoke(main, ["run", "flaky.yaml", "--data", "data.jsonl",
                                 "--output", f"{s3}/a", "-q"])  # fmt: skip
    assert again.exit_code == 2
    assert f"error: run folder '{s3}/a' already exists and holds a run" in again.stderr
    missing = runner.invoke(main, ["show", f"{s3}/nothing"])
    assert missing.exit_code == 2
    assert f"error: no run folder '{s3}/nothing' (no run.json there)" in missing.stderr


@pytest.mark.slow
def test_of_two_takers_at_once_in_the_store_exactly_one_wins(s3: str) -> None:
    for attempt in range(3):
        race(RemoteFolder(f"{s3}/r{attempt}"), 4)


@pytest.mark.slow
def test_a_run_killed_on_one_machine_is_resumed_from_another(
    project: Path, s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{s3}/r1"
    proc = start_flowkit(
        project,
        *("run", "flaky.yaml", "f1_score", "--data", "data.jsonl", "--output", url, "-q"),
        *("--concurrency", "2"),
        env={"FLOWKIT_TEST_SLEEP": "0.05", LEASE_ENV: str(TTL)},
    )
    deadline = time.monotonic() + 60
    while len((stored(url).get("outputs.jsonl") or b"").splitlines()) < 5:
        assert time.monotonic() < deadline, "the run never uploaded 5 rows"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    done = {r["line"]: r for r in map(json.loads, stored(url)["outputs.jsonl"].splitlines())}
    assert 5 <= len(done) < ROWS
    # Another machine: its own staging folder and host name, sharing only the store.
    monkeypatch.setenv(STAGING_ENV, str(tmp_path / "staging-there"))
    monkeypatch.setattr(socket, "gethostname", lambda: "elsewhere")
    lease: dict[str, Any] = json.loads(stored(url)["lease-000001.json"])
    time.sleep(max(0.0, lease["expires"] - time.time()) + 0.1)

    resumed = CliRunner().invoke(main, ["run", "--resume", url, "-q"])

    assert resumed.exit_code == 0, resumed.output
    assert f"rows {ROWS}: {ROWS} ok, 0 failed" in resumed.stdout
    assert f"run folder: {url}" in resumed.stdout  # the store, not the staging copy
    back = Path(RemoteFolder(url, tmp_path / "read" / "r1").download())
    assert comparable(back) == clean_run(project)  # no row lost, none doubled
    final = {r["line"]: r for r in read_jsonl(back / "outputs.jsonl")}
    assert all(final[line] == rec for line, rec in done.items())
    info = json.loads(stored(url)["run.json"])
    assert info["status"] == "completed" and info["lease"]["host"] == "elsewhere"
    assert json.loads(stored(url)["lease-000002.json"])["released"] is True


def test_a_store_that_refuses_is_an_error_naming_the_url_not_a_traceback(
    project: Path, s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No such bucket for a new run; credentials the store refuses for show and resume."""
    runner = CliRunner()
    made = runner.invoke(main, ["run", "f1_score", "--data", "data.jsonl",
                                "--output", "s3://no-such-bucket-here/runs/x", "-q"])  # fmt: skip
    assert made.exit_code == 2, made.output
    assert made.stderr.startswith("error: s3://no-such-bucket-here/runs/x: the object store ")
    assert "Traceback" not in made.output
    assert runner.invoke(main, ["run", "f1_score", "--data", "data.jsonl",
                                "--output", f"{s3}/a", "-q"]).exit_code == 0  # fmt: skip
    monkeypatch.setattr(RemoteFolder, "names", _refused)
    for args in (
        ["show", f"{s3}/a"],
        ["run", "--resume", f"{s3}/a"],
        ["show", "a", "--runs-dir", s3],
    ):
        refused = runner.invoke(main, args)
        assert refused.exit_code == 2, (args, refused.output)
        assert "the object store failed: Access Denied" in refused.stderr, args
        assert "check that the bucket exists" in refused.stderr


def _refused(self: RemoteFolder) -> list[str]:
    raise PermissionError("Access Denied")


def test_a_report_of_a_run_in_the_store_is_written_here_not_in_the_temporary_copy(
    project: Path, s3: str
) -> None:
    """The copy `report` reads is removed when the command ends: by default the page is
    written in the current folder, named after the run."""
    runner = CliRunner()
    ran = runner.invoke(main, ["run", "f1_score", "--data", "data.jsonl",
                               "--output", f"{s3}/a", "-q"])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert f"run folder: {s3}/a\n" in ran.stdout  # the URL, not the staging copy
    made = runner.invoke(main, ["report", f"{s3}/a"])
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith("report: a-report.html ")
    assert (project / "a-report.html").is_file()


def test_ctrl_c_on_a_run_in_the_store_names_its_url(
    s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from flowkit.runs.job import Interrupted

    # An earlier in-process CLI error ignores Ctrl-C from then on (flowkit.cli.group).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stop.py").write_text(
        "import os, signal, time\n\n\ndef stop(x: int) -> int:\n"
        "    if x == 3:\n        os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.02)  # the rows after it are not all done before it is seen\n"
        "    return x\n"
    )
    (tmp_path / "stop.yaml").write_text(
        "name: stop\ninputs: {x: {type: integer}}\noutputs: {y: ${s.output}}\nnodes:\n"
        "  - {name: s, type: python, source: stop.py, function: stop, inputs: {x: ${inputs.x}}}\n"
    )
    (tmp_path / "x.jsonl").write_text("".join(f'{{"x": {i}}}\n' for i in range(50)))
    try:
        with pytest.raises(Interrupted) as raised:
            flowkit.run("stop.yaml", "x.jsonl", output=f"{s3}/stopped", use_cache=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert raised.value.message == f"interrupted; finished rows are kept in {s3}/stopped"
