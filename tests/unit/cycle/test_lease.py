"""Two head nodes, one writer (cycle.lease): the lease itself, and two services sharing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.cycle.lease import LEASE_FILE, LEASE_INTERVALS, Lease, LeaseLost
from slurm_drf.cycle.store import StateStore
from slurm_drf.service.loop import Service, ServiceParts
from tests.unit.builders import job, node, snapshot
from tests.unit.service.test_service import FakeSource, FakeWriter


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_one_holder_at_a_time_and_the_hold_ends(tmp_path: Path) -> None:
    clock = Clock()
    a = Lease(tmp_path, 60.0, clock=clock, name="head1")
    b = Lease(tmp_path, 60.0, clock=clock, name="head2")
    assert a.acquire() is None
    hold = b.acquire()
    assert hold is not None and hold.holder == "head1" and hold.until == clock.now + LEASE_INTERVALS * 60.0
    clock.now += 60.0
    a.confirm()  # renewed
    clock.now += LEASE_INTERVALS * 60.0 - 1
    assert b.acquire() is not None
    clock.now += 2
    assert b.acquire() is None  # a's hold ended: b takes it
    with pytest.raises(LeaseLost, match="head2 holds the lease now; this cycle writes nothing"):
        a.confirm()


def test_a_released_lease_is_taken_at_once(tmp_path: Path) -> None:
    clock = Clock()
    a = Lease(tmp_path, 60.0, clock=clock, name="head1")
    b = Lease(tmp_path, 60.0, clock=clock, name="head2")
    assert a.acquire() is None
    a.release()
    assert b.acquire() is None
    a.release()  # not a's to release any more
    assert json.loads((tmp_path / LEASE_FILE).read_text())["holder"] == "head2"


@pytest.mark.parametrize("text", ["", "{", '{"holder": 3, "until": 1}', '{"holder": "x"}', "[]"])
def test_an_unreadable_lease_is_taken_afresh(tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / LEASE_FILE).write_text(text)
    assert Lease(tmp_path, 60.0, name="head1").acquire() is None
    assert "unreadable lease" in caplog.text


def service(tmp_path: Path, name: str, lease_dir: Path, writer: FakeWriter) -> Service:
    config = Config(resources=("cpu",), state_dir=str(tmp_path / name), lease_dir=str(lease_dir), interval=60.0)
    jobs = [job("a", job_id="1", cpu=1, nice=5), job("b", job_id="2", cpu=2)]
    source = FakeSource([snapshot([node(cpu=8)], jobs)])
    return Service(
        config,
        StateStore(config.state_dir, config.lease_dir),
        parts=ServiceParts(lambda _config: source, lambda _source: writer, lambda _config: []),
    )


def test_two_services_one_writer_and_the_standby_takes_over(tmp_path: Path) -> None:
    lease_dir = tmp_path / "shared"
    first_writes, second_writes = FakeWriter(), FakeWriter()
    first = service(tmp_path, "head1", lease_dir, first_writes)
    second = service(tmp_path, "head2", lease_dir, second_writes)
    assert first.run_once() is None
    assert len(first_writes.writes) == 2
    delay = second.run_once()
    assert delay is not None and 0 < delay <= LEASE_INTERVALS * 60.0 + 1
    assert second.last_status.startswith("standby: ")
    assert second_writes.writes == []
    # The state both share says each job's own nice, whoever writes next.
    assert StateStore(tmp_path / "head2", lease_dir).load().jobs["1"].user_nice == 5
    assert first._lease is not None
    first._lease.release()  # a clean stop
    assert second.run_once() is None
    # (This fake Slurm never takes a write, so the new holder writes the same values again.)
    assert second_writes.writes == first_writes.writes
    assert not second.last_status.startswith("standby")


def test_leftovers_of_a_killed_save_go_but_not_the_other_heads_save(tmp_path: Path) -> None:
    """A save killed between its temporary file and the rename leaves the file; the next start removes
    it, except, in the shared directory, one young enough to be the other daemon's save in progress."""
    import os

    from slurm_drf.cycle.store import LEFTOVER_AGE

    local = StateStore(tmp_path / "local")
    local.ensure_directory()
    stale = local.path.parent / ".state.json.4242.abcd1234.tmp"
    stale.write_text("{")
    local.lock()
    local.unlock()
    assert not stale.exists()

    shared = StateStore(tmp_path / "head", tmp_path / "shared")
    shared.ensure_directory()
    young = shared.path.parent / ".state.json.77.young000.tmp"
    old = shared.path.parent / ".state.json.78.old00000.tmp"
    young.write_text("{")
    old.write_text("{")
    past = old.stat().st_mtime - LEFTOVER_AGE - 1
    os.utime(old, (past, past))
    shared.lock()
    shared.unlock()
    assert young.exists() and not old.exists()
