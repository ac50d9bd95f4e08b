"""Nothing is paid twice: a run in batch mode killed while its batch runs is finished by a
resume that follows the batch it recorded instead of sending its calls again."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.batch.records import FILE, BatchRecord, BatchRecords
from flowkit.cli.main import main
from flowkit.runs.folder import read_run_info
from flowkit.testing.server import LocalServer
from tests.batch.conftest import questions
from tests.support import start_flowkit

ROWS = 12


def _kill_while_the_first_batch_runs(
    llm_server: LocalServer, chained: Path, workdir: Path, *, signum: int = signal.SIGKILL
) -> Path:
    llm_server.configure(batch_delay=600.0)  # the first batch runs until the test says
    proc = _started(chained, workdir, ROWS)
    time.sleep(0.3)  # polling
    proc.send_signal(signum)
    proc.communicate(timeout=30)
    assert llm_server.stats()["batches_created"] == 1
    llm_server.configure(batch_delay=0.0)  # the batch is done by the next look
    return workdir / "runs" / "b"


def _started(chained: Path, workdir: Path, rows: int) -> subprocess.Popen[str]:
    """`flowkit run --batch` in a process of its own, once it has created its first batch."""
    data = questions(workdir, rows)
    proc = start_flowkit(
        workdir, "run", str(chained), "--data", str(data), "--batch", "--name", "b", "-q"
    )
    records = workdir / "runs" / "b" / FILE
    deadline = time.monotonic() + 60
    while '"created"' not in (records.read_text() if records.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def _resumed_pays_nothing_twice(llm_server: LocalServer, run_dir: Path) -> None:
    result = flowkit.resume(run_dir)
    stats = llm_server.stats()
    # The first wave's batch was followed, not sent again; the second wave's is new.
    assert stats["batches_created"] == 2
    assert (stats["batch_lines"], stats["batch_paid_twice"]) == (2 * ROWS, 0)
    assert stats["chat_completions"] == 0
    assert result.counts["succeeded"] == ROWS
    assert read_run_info(run_dir)["status"] == "completed"


@pytest.mark.slow
def test_a_kill_during_polling_then_resume_sends_no_batch_again(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    run_dir = _kill_while_the_first_batch_runs(llm_server, chained, workdir)
    _resumed_pays_nothing_twice(llm_server, run_dir)


@pytest.mark.slow
def test_a_kill_before_the_batch_id_was_recorded_is_found_by_its_nonce(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    run_dir = _kill_while_the_first_batch_runs(llm_server, chained, workdir)
    records = run_dir / FILE
    events = [json.loads(line) for line in records.read_text().splitlines()]
    # As if killed after the batch was created but before its id was written down.
    kept = [e for e in events if e["event"] != "created"]
    records.write_text("".join(json.dumps(e) + "\n" for e in kept))
    _resumed_pays_nothing_twice(llm_server, run_dir)


@pytest.mark.slow
def test_ctrl_c_leaves_the_batch_running_and_the_run_interrupted(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    run_dir = _kill_while_the_first_batch_runs(llm_server, chained, workdir, signum=signal.SIGINT)
    assert read_run_info(run_dir)["status"] == "interrupted"
    assert llm_server.stats()["batches_cancelled"] == 0
    _resumed_pays_nothing_twice(llm_server, run_dir)


@pytest.mark.slow
def test_batches_lists_a_runs_batches_and_cancels_only_when_asked(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    llm_server.configure(batch_delay=600.0)
    try:
        proc = _started(chained, workdir, 3)
        records = workdir / "runs" / "b" / FILE
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        (batch_id,) = [
            json.loads(e)["batch_id"] for e in records.read_text().splitlines() if '"created"' in e
        ]

        listed = CliRunner().invoke(main, ["batches", "b"])
        assert listed.exit_code == 0, listed.output
        assert batch_id in listed.stdout and "validating" in listed.stdout
        assert llm_server.stats()["batches_cancelled"] == 0

        cancelled = CliRunner().invoke(main, ["batches", "b", "--cancel"])
        assert cancelled.exit_code == 0, cancelled.output
        assert "cancelled" in cancelled.stdout
        assert llm_server.stats()["batches_cancelled"] == 1
    finally:
        llm_server.configure(batch_delay=0.0)


def test_a_batch_made_by_a_create_whose_reply_was_lost_is_found_not_made_again(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    llm_server.configure(batch_create_lost=1)
    try:
        result = flowkit.run(chained, questions(tmp_path, 4), runs_root=tmp_path, batch=True)
    finally:
        llm_server.configure(batch_create_lost=0)
    stats = llm_server.stats()
    assert (stats["batches_created"], stats["batch_lines"], stats["batch_paid_twice"]) == (2, 8, 0)
    assert result.counts["succeeded"] == 4
    records = BatchRecords(result.run_dir).read()
    assert [r.batch_id is not None and r.status == "completed" for r in records] == [True, True]


def test_a_resume_whose_batches_the_provider_forgot_sends_their_failed_calls_again(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    # A run's recorded batches unknown at the provider (another key or project, a provider
    # that forgot them): the resume sends their calls again instead of failing on a 404 each
    # time, and `flowkit batches` says so instead of a traceback.
    llm_server.configure(batch_fail_rate=1.0)
    try:
        first = flowkit.run(chained, questions(workdir, 3), batch=True, name="gone")
    finally:
        llm_server.configure(batch_fail_rate=0.0)
    assert first.counts["failed"] == 3
    llm_server.reset()  # the server forgets every batch
    listed = CliRunner().invoke(main, ["batches", "gone"])
    assert listed.exit_code == 0, listed.output
    assert "not found" in listed.stdout
    result = flowkit.resume(first.run_dir)
    assert result.counts["succeeded"] == 3
    assert llm_server.stats()["batch_paid_twice"] == 0


def test_a_damaged_line_in_batches_jsonl_is_skipped_not_a_traceback(tmp_path: Path) -> None:
    records = BatchRecords(tmp_path)
    record = _record("n1")
    records.submitting(record)
    records.created("n1", "batch_1")
    with records.path.open("a", encoding="utf-8") as out:
        out.write('[1, 2]\n{"event": "submit", "nonce": "x"}\n"text"\n{"event": "created"\n')
    (read,) = records.read()
    assert (read.nonce, read.batch_id, read.custom_ids) == ("n1", "batch_1", ["fk-a"])


def _record(nonce: str) -> BatchRecord:
    return BatchRecord(nonce, "openai", "file-1", ["fk-a"])


def test_a_batch_is_found_by_its_nonce_when_this_clock_is_ahead_of_the_providers(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # The record's time is this machine's, a batch's created_at the provider's: a clock a few
    # minutes ahead must not stop the search before the batch (which would be paid twice).
    import asyncio

    import openai

    from flowkit.batch.collector import find_by_nonce
    from flowkit.batch.records import NONCE_KEY

    async def made_then_found() -> str | None:
        client = openai.AsyncOpenAI(base_url=llm_server.base_url, api_key="sk-local-test")
        line = b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}\n'
        upload = await client.files.create(file=("in.jsonl", line), purpose="batch")
        for nonce in ("mine", "another"):  # another batch made after this one
            await client.batches.create(
                input_file_id=upload.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata={NONCE_KEY: nonce},
            )
        record = _record("mine")
        record.submitted_at = time.time() + 300  # this clock five minutes ahead
        found = await find_by_nonce(client, record, BatchRecords(tmp_path))
        await client.close()
        return found

    assert asyncio.run(made_then_found()) == "batch_000002"
