"""An endpoint opens where its last run left off: at the pace it learned from 429s (a window is
no longer kept: every run opens at its concurrency), kept in the cache folder's endpoints.json
for a day and never with a key. Real HTTP to the local test server for the runs; the pacer and
the file alone for the rest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.llm import clients, memory
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.llm.memory import TTL, EndpointMemory, Recalled
from flowkit.llm.pacing import HEADER_MARGIN, Pacer
from flowkit.llm.ratelimits import Quota, RateHeaders
from flowkit.llm.session import run_session
from flowkit.testing.server import LocalServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _no_sleep(_: float) -> None:
    return None


def _pacer(**limits: Any) -> tuple[Pacer, Clock]:
    clock = Clock()
    return Pacer(Limits(**limits), window=60.0, clock=clock, sleep=_no_sleep), clock


def test_a_window_is_not_kept_and_one_kept_before_is_ignored() -> None:
    first, _ = _pacer(concurrency=32)
    assert first.in_flight_limit == 32  # no ramp to remember
    for _ in range(20):
        first.answered(True, first.generation)
    assert first.remembered() == (None, None)  # answered at full concurrency: forget any pace
    second, _ = _pacer(concurrency=32)
    second.recall(24, None)  # what an older flowkit kept
    assert second.in_flight_limit == 32
    alone, _ = _pacer(concurrency=32, slow_start=True)
    alone.recall(24, None)
    assert alone.in_flight_limit == 1  # its first reply's headers are still awaited


def test_a_learned_pace_is_kept_and_a_new_pacer_climbs_from_it() -> None:
    pacer, clock = _pacer(concurrency=32)
    pacer.recall(None, 600.0)
    assert pacer.rate() == 600.0
    assert pacer.in_flight_limit == 32  # paced: the window no longer holds it back
    clock.now += 60.0
    climbed = pacer.rate()
    assert climbed is not None and climbed > 600.0
    assert pacer.remembered() == (None, climbed)


def test_nothing_is_kept_for_endpoints_whose_headers_or_declaration_say_it_all() -> None:
    headed, _ = _pacer(concurrency=32)
    for _ in range(20):
        headed.answered(True, headed.generation)
    headed.learn_headers(RateHeaders(Quota(600, 500, 1.0), Quota(None, None, None)))
    assert headed.remembered() == (None, None)  # forget whatever was kept
    declared, _ = _pacer(concurrency=32, slow_start=False)
    declared.answered(True, declared.generation)
    assert declared.remembered() == (None, None)
    silent, _ = _pacer(concurrency=32)  # the endpoint never answered (it was down)
    assert silent.remembered() is None  # nothing learned: keep what was kept
    declared.recall(4, None)
    assert declared.in_flight_limit == 32


class FakeScheduler:
    def __init__(
        self, learned: Recalled | None, url: str = "https://user:pw@gw.example/v1"
    ) -> None:
        self.url = url
        self.learned = learned
        self.recalled: list[Recalled] = []

    def remembered(self) -> Recalled | None:
        return self.learned

    def recall(self, found: Recalled) -> None:
        self.recalled.append(found)


def test_the_file_round_trips_expires_and_holds_no_credentials(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    clock = Clock()
    identity = ("judge", "https://gw.example/v1", "digest-of-key")
    first = EndpointMemory(path, clock=clock)
    first.attach(identity, "judge-1", FakeScheduler(Recalled(24, None)))
    first.save()
    text = path.read_text()
    assert "pw" not in text and "user" not in text and "digest-of-key" not in text
    (entry,) = json.loads(text)["endpoints"].values()
    assert entry["url"] == "https://gw.example/v1" and entry["window"] == 24
    assert entry["model"] == "judge-1"

    later = FakeScheduler(None)
    EndpointMemory(path, clock=clock).attach(identity, "judge-1", later)
    assert later.recalled == [Recalled(24, None)]
    clock.now += TTL + 1
    stale = FakeScheduler(None)
    EndpointMemory(path, clock=clock).attach(identity, "judge-1", stale)
    assert stale.recalled == []


def test_a_run_at_another_concurrency_finds_what_the_last_one_learned(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    address = ("judge", "openai", "https://gw.example/v1", "", "", "digest-of-key")
    first = EndpointMemory(path)
    first.attach((*address, '{"concurrency":32}'), "m", FakeScheduler(Recalled(32, None)))
    first.save()
    wider = FakeScheduler(None)
    EndpointMemory(path).attach((*address, '{"concurrency":128}'), "m", wider)
    assert wider.recalled == [Recalled(32, None)]


def test_an_endpoint_paced_by_headers_now_is_forgotten_and_a_bad_file_ignored(
    tmp_path: Path,
) -> None:
    path = tmp_path / "endpoints.json"
    identity = ("judge", "https://gw.example/v1", "k")
    first = EndpointMemory(path)
    first.attach(identity, "m", FakeScheduler(Recalled(None, 600.0)))
    first.save()
    short = EndpointMemory(path)  # a run that learned nothing keeps what was kept
    short.attach(identity, "m", FakeScheduler(None))
    short.save()
    (entry,) = json.loads(path.read_text())["endpoints"].values()
    assert entry["rpm"] == 600.0
    second = EndpointMemory(path)
    second.attach(identity, "m", FakeScheduler(Recalled(None, None)))
    second.save()
    assert json.loads(path.read_text())["endpoints"] == {}
    path.write_text("{not json")
    fresh = FakeScheduler(None)
    EndpointMemory(path).attach(identity, "m", fresh)
    assert fresh.recalled == []


@contextlib.contextmanager
def _capped(server: LocalServer) -> Iterator[None]:
    """200 requests a second over a 3-second window (a 10-request burst), no headers: a first
    contact's opening at full concurrency is cut and a pace measured."""
    server.configure(rpm=600, limit_window=3.0, retry_after=0.2)
    try:
        yield
    finally:
        server.configure(rpm=0, limit_window=60.0, retry_after=1.0)


def _rejected(server: LocalServer, folder: Path | None, calls: int) -> int:
    """The requests the server rejected while ``calls`` chats ran at once, with the endpoint
    memory in ``folder`` (None: none)."""
    endpoint = Endpoint(
        connection="local",
        kind="openai",
        model="flowkit-test",
        base_url=server.base_url,
        limits=Limits(concurrency=32, max_retries=20, backoff_max=0.2),
    )
    server.reset()

    async def body() -> None:
        asks = (
            chat(endpoint, "flowkit-test", [{"role": "user", "content": f"q{i}"}], {})
            for i in range(calls)
        )
        assert all(r.text for r in await asyncio.gather(*asks))
        await clients.aclose_clients()

    with run_session(folder):  # a run's session: its own schedulers, as a new process's
        asyncio.run(body())
    return int(server.stats()["by_status"].get("429", 0))


# Real time: the burst must outrun the server's window, which a starved client may not do.
@pytest.mark.slow
def test_a_second_run_opens_at_the_pace_the_first_measured(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # 200 requests a second over a 3-second window, a 10-request burst, no headers: a first
    # contact opens at 32 in flight and its burst is cut; the next run opens at the pace.
    with _capped(llm_server):
        first = _rejected(llm_server, tmp_path, 64)
        (entry,) = json.loads((tmp_path / memory.FILE).read_text())["endpoints"].values()
        assert entry["rpm"] > 0 and entry.get("window") is None
        second = _rejected(llm_server, tmp_path, 64)
        assert first >= 10 and second <= first // 2, (first, second)


# Real time: the burst must outrun the server's window, which a starved client may not do.
@pytest.mark.slow
def test_a_run_keeps_its_endpoints_beside_the_cache(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"context": f"c{i}", "answer": f"a{i}"}) + "\n" for i in range(40))
    )
    with _capped(llm_server):  # its opening burst is cut, and the pace measured is kept
        flowkit.run(
            "groundedness", rows, cache_dir=tmp_path / "cache", use_cache=False, concurrency=16
        )
    (entry,) = json.loads((tmp_path / "cache" / memory.FILE).read_text())["endpoints"].values()
    assert entry["url"] == llm_server.base_url and entry["rpm"] > 0
    assert "sk-local-test" not in (tmp_path / "cache" / memory.FILE).read_text()


# Real time against a rate cap: the pace is learned from how fast replies come back, which a
# test running beside others on the same cores skews; the slow stage runs it alone (-n0).
@pytest.mark.slow
def test_a_run_that_opens_from_memory_says_so(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"context": f"c{i}", "answer": f"a{i}"}) + "\n" for i in range(40))
    )

    def run() -> Any:
        return flowkit.run(
            "groundedness", rows, cache_dir=tmp_path / "cache", use_cache=False, concurrency=16
        )

    with _capped(llm_server):
        first = run()
        assert not any("last run" in n for n in first.info["notes"])  # it found the endpoint out
        second = run()
        third = run()  # a notebook's next run, in the same process, opens from the file alike
    (note,) = [n for n in second.info["notes"] if "last run" in n]
    where = tmp_path / "cache" / memory.FILE
    rpm = json.loads(where.read_text())["endpoints"].popitem()[1]["rpm"]
    assert re.fullmatch(
        re.escape(f"{llm_server.base_url} (flowkit-test) opened at ")
        + r"\d+"
        + re.escape(
            " requests a minute, as its last run (0 min ago) left it; kept in "
            f"{where} (delete the file to find endpoints out afresh)"
        ),
        note,
    )
    assert rpm > 0
    kept = json.loads((second.run_dir / "run.json").read_text())
    assert note in kept["notes"]  # the run folder says why this run started at full speed
    # A note is nothing to act on: not among the notices a run prints and its report shows.
    assert not any("last run" in n for n in kept["notices"])
    assert len([n for n in third.info["notes"] if "last run" in n]) == 1


# Real time against a rate cap: the pace is learned from how fast replies come back, which a
# test running beside others on the same cores skews; the slow stage runs it alone (-n0).
@pytest.mark.slow
def test_workers_that_open_from_memory_say_so_in_the_runs_notes(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"context": f"c{i}", "answer": f"a{i}"}) + "\n" for i in range(40))
    )

    def run(backend: str) -> Any:
        return flowkit.run(
            "groundedness",
            rows,
            cache_dir=tmp_path / "cache",
            use_cache=False,
            concurrency=16,
            backend=backend,  # type: ignore[arg-type]
            chunk_size=10,
        )

    with _capped(llm_server):
        run("local")  # finds the endpoint out
        second = run("threading")  # each worker opens where that run left it
    notes = [n for n in second.info["notes"] if "last run" in n]
    assert len(notes) == 1 and f"{llm_server.base_url} (flowkit-test) opened at" in notes[0]


def test_an_unreadable_file_is_one_notice(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    path.symlink_to("/dev/zero")
    memory = EndpointMemory(path)
    memory.attach(("x",), "m", FakeScheduler(None))
    assert memory.notices == [
        f"ignored {path}: not a readable endpoints file (endpoints are found out afresh; the run "
        "replaces it)"
    ]


def test_remaining_counts_without_limits_pace_as_azure_sends_them() -> None:
    # Azure sends x-ratelimit-remaining-{requests,tokens} alone: the minute's budget is at least
    # the most ever left, so the first reply paces the run and feeds the charge learner.
    pacer, clock = _pacer(concurrency=32)
    pacer.learn_headers(RateHeaders(Quota(None, 299, None), Quota(None, 149_400, None)))
    assert pacer.rate() == 299 * HEADER_MARGIN
    assert pacer.token_rate() == 149_400 * HEADER_MARGIN
    clock.now += 1.0
    pacer.learn_headers(RateHeaders(Quota(None, 250, None), Quota(None, 120_000, None)))
    assert pacer.token_rate() == 149_400 * HEADER_MARGIN  # a lower count is spending, not a cap
    assert pacer.remembered() == (None, None)  # paced by headers: nothing to keep
