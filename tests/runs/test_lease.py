"""A run folder's lease: a run killed on one host is resumed from another once its lease
expires, a live lease is refused naming its holder, and of two resumers at once one wins."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.flow.loader import load_flows
from flowkit.runs.folder import (
    LeaseLost,
    RunWriter,
    claim_run_dir,
    effective_status,
    read_run_info,
)
from flowkit.runs.lease import LEASE_ENV, Lease, LocalPlace, Place, lease_name, take
from tests.runs.test_resumption import ROWS, clean_run, comparable, wait_for_rows
from tests.runs.test_resumption import project as project  # a fixture
from tests.support import read_jsonl, start_flowkit

TTL = 2.0


def slow_run(project: Path, *extra: str) -> Any:
    return start_flowkit(
        project,
        *("run", "flaky.yaml", "f1_score", "--data", "data.jsonl", "--name", "r1", "-q"),
        *("--concurrency", "2", *extra),
        env={"FLOWKIT_TEST_SLEEP": "0.05", LEASE_ENV: str(TTL)},
    )


@pytest.mark.slow
def test_a_run_killed_on_one_host_is_resumed_from_another(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = slow_run(project)
    run_dir = project / "runs" / "r1"
    wait_for_rows(run_dir / "outputs.jsonl", 5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    done = {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}
    assert 5 <= len(done) < ROWS
    # Read from another host: the dead process cannot be seen, only its lease.
    monkeypatch.setattr(socket, "gethostname", lambda: "elsewhere")
    info = read_run_info(run_dir)
    lease = info["lease"]
    assert (info["status"], lease["pid"], lease["role"]) == ("running", proc.pid, "run")
    if lease["expires"] > time.time() + 0.5:  # (a loaded machine may be past it already)
        assert effective_status(info) == "running"
        with pytest.raises(UsageError) as held:
            flowkit.resume("r1")
        assert str(held.value).startswith(
            f"run 'r1' is still running on host {lease['host']} (pid {proc.pid}, lease "
            f"{lease['holder']}); its lease expires at {lease['expires_at']} (in "
        )
        assert "hint: wait for it, or stop it; once its lease expires any host can resume it" in (
            str(held.value)
        )
    time.sleep(max(0.0, lease["expires"] - time.time()) + 0.1)
    assert effective_status(read_run_info(run_dir)) == "interrupted"
    shown = CliRunner().invoke(main, ["show", "r1"])
    assert "interrupted (process gone)" in shown.stdout

    resumed = CliRunner().invoke(main, ["run", "--resume", "r1", "-q"])

    assert resumed.exit_code == 0, resumed.output
    assert f"rows {ROWS}: {ROWS} ok, 0 failed" in resumed.stdout
    assert comparable(run_dir) == clean_run(project)  # no row lost, none doubled
    final = {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}
    assert all(final[line] == rec for line, rec in done.items())
    info = read_run_info(run_dir)
    assert info["status"] == "completed"
    assert (info["lease"]["host"], info["lease"]["generation"]) == ("elsewhere", 2)
    assert info["lease"]["released"] is True


def race(place: Place, takers: int) -> None:
    """``takers`` threads take ``place``'s lease at the same instant: exactly one wins."""
    start = threading.Barrier(takers)
    won: list[Lease] = []
    refused: list[str] = []

    def taker() -> None:
        start.wait()
        try:
            won.append(take(place, "r", "resume"))
        except UsageError as err:
            refused.append(err.message)

    threads = [threading.Thread(target=taker) for _ in range(takers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == takers - 1
    assert all(m.startswith("run 'r' is being resumed on host ") for m in refused)
    won[0].release()
    assert sorted(place.names()) == [lease_name(1)]


def test_of_two_resumers_at_once_exactly_one_takes_the_folder(tmp_path: Path) -> None:
    for attempt in range(10):
        race(LocalPlace(tmp_path / f"r{attempt}"), 6)


@pytest.mark.slow
def test_two_resumes_of_one_run_at_once_one_runs_it(project: Path) -> None:
    (project / "down").touch()
    flowkit.run(load_flows(["flaky.yaml", "f1_score"]), "data.jsonl", name="r1")  # a third failed
    (project / "down").unlink()
    env = {"FLOWKIT_TEST_SLEEP": "0.1", LEASE_ENV: str(TTL)}
    procs = [start_flowkit(project, "run", "--resume", "r1", "-q", env=env) for _ in range(2)]
    ends = [(p.wait(timeout=120), *p.communicate()) for p in procs]

    assert sorted(code for code, _, _ in ends) == [0, 2]
    (_, out, _), (_, _, err) = sorted(ends, key=lambda e: e[0])
    assert f"rows {ROWS}: {ROWS} ok, 0 failed" in out
    assert "error: run 'r1' is being resumed on host " in err
    assert comparable(project / "runs" / "r1") == clean_run(project)
    info = read_run_info(project / "runs" / "r1")
    assert len(info["resumes"]) == 1


def test_a_holder_whose_lease_was_taken_over_stops_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LEASE_ENV, "0.3")
    writer = RunWriter(tmp_path / "r", {"flow": {"name": "f"}})
    first = json.loads((tmp_path / "r" / lease_name(1)).read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # renewed by its heartbeat
        if json.loads((tmp_path / "r" / lease_name(1)).read_text())["expires"] > first["expires"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the lease was never renewed")
    # Its host stalled past the expiry and another host took the folder over.
    taken = {"holder": "elsewhere:7:ab", "host": "elsewhere", "expires": time.time() + 60}
    (tmp_path / "r" / lease_name(2)).write_text(json.dumps(taken))
    deadline = time.monotonic() + 10
    while writer.lease.lost is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.lease.lost == taken
    before = (tmp_path / "r" / "run.json").read_bytes()
    with pytest.raises(LeaseLost) as lost:
        writer.flush()
    assert str(lost.value) == (
        "run 'r' was taken over by elsewhere:7:ab (host elsewhere) after this process's lease "
        "expired; it stops writing"
    )
    writer.close("completed", {"m": 1})
    assert (tmp_path / "r" / "run.json").read_bytes() == before  # the new holder's to write
    assert not (tmp_path / "r" / "metrics.json").exists()


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf"])
def test_a_bad_lease_length_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(LEASE_ENV, value)
    with pytest.raises(UsageError) as bad:
        take(LocalPlace(tmp_path), "r", "run")
    assert (
        bad.value.message == f"FLOWKIT_LEASE_SECONDS={value!r} must be a number of seconds above 0"
    )


def test_a_new_run_never_clears_a_folder_another_host_is_writing(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    lease = {"holder": "gpu-7:41:ab", "host": "gpu-7", "pid": 41, "role": "run"}
    (run_dir / lease_name(3)).write_text(json.dumps({**lease, "expires": time.time() + 60}))

    with pytest.raises(UsageError) as held:
        claim_run_dir(run_dir, overwrite=True)

    assert held.value.message.startswith(
        "run 'r' is still running on host gpu-7 (pid 41, lease gpu-7:41:ab); its lease expires at "
    )
    assert (run_dir / "run.json").exists()
    (run_dir / lease_name(3)).write_text(json.dumps({**lease, "expires": time.time() - 1}))
    claim_run_dir(run_dir, overwrite=True).close()  # expired: the folder is free
    assert not (run_dir / "run.json").exists()


@pytest.mark.slow
def test_a_run_sent_sigterm_is_interrupted_at_once_and_resumable_from_anywhere(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Ctrl-C stops a run (what a scheduler, `kill` or a container's stop sends)."""
    # A lease far longer than the test: a run that did not release it could not be resumed.
    proc = start_flowkit(
        project,
        *("run", "flaky.yaml", "f1_score", "--data", "data.jsonl", "--name", "r1", "-q"),
        *("--concurrency", "2"),
        env={"FLOWKIT_TEST_SLEEP": "0.05", LEASE_ENV: "600"},
    )
    run_dir = project / "runs" / "r1"
    wait_for_rows(run_dir / "outputs.jsonl", 5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "error: interrupted; finished rows are kept in runs/r1" in err
    done = {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}
    assert 5 <= len(done) < ROWS
    monkeypatch.setattr(socket, "gethostname", lambda: "elsewhere")
    info = read_run_info(run_dir)
    assert (info["status"], info["lease"]["released"]) == ("interrupted", True)

    resumed = CliRunner().invoke(main, ["run", "--resume", "r1", "-q"])

    assert resumed.exit_code == 0, resumed.output
    assert comparable(run_dir) == clean_run(project)  # no row lost, none doubled
    final = {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}
    assert all(final[line] == rec for line, rec in done.items())
    assert read_run_info(run_dir)["lease"]["host"] == "elsewhere"
