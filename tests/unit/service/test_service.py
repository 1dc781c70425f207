"""The service loop (slurm_drf.service.loop) without Slurm: fake sources and writers.

Backoff, reload keeping the last good config, observers that raise,
sd_notify datagrams on a real AF_UNIX socket, signals, cycles that never
overlap, one daemon per state directory, a corrupt state file, config
files others could change.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from slurm_drf.cli.daemon import cmd_daemon, config_loader
from slurm_drf.config.load import load_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleObserver, CycleReport
from slurm_drf.cycle.store import StateStore, parse_state
from slurm_drf.errors import ConfigError, InputError, SlurmReadError, StateError
from slurm_drf.model.types import Snapshot
from slurm_drf.service.loop import ERROR_DELAYS, Service, ServiceOptions, ServiceParts, compute_error_delay
from slurm_drf.service.notify import Notifier, parse_notify_address, parse_watchdog_seconds
from slurm_drf.slurm.write import Write, WriteResult
from tests import polling
from tests.unit.builders import job, node, snapshot

TIMEOUT = 20.0
T = TypeVar("T")


# ---------------------------------------------------------------------------
# Fakes
# ---------------------------------------------------------------------------


def cluster() -> Snapshot:
    nodes = [node("n1", cpu=64, mem=512000)]
    jobs = [
        job("physics", "RUNNING", cpu=32, mem=1000, job_id="1"),
        job("physics", cpu=8, mem=1000, job_id="2"),
        job("chemistry", cpu=8, mem=1000, job_id="3"),
    ]
    return snapshot(nodes, jobs)


class FakeSource:
    """A ClusterSource that replays a script: a Snapshot, or an exception to raise."""

    name = "fake"

    def __init__(
        self, script: Sequence[Snapshot | Exception] = (), *, before: Callable[[int], None] | None = None
    ) -> None:
        self.script = list(script)
        self.calls = 0
        self.before = before
        self.started: list[float] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def fetch_snapshot(self) -> Snapshot:
        with self._lock:
            self.calls += 1
            call = self.calls
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.started.append(time.monotonic())
        try:
            if self.before is not None:
                self.before(call)
            step = self.script[min(call, len(self.script)) - 1] if self.script else cluster()
            if isinstance(step, Exception):
                raise step
            return step
        finally:
            with self._lock:
                self.running -= 1


class FakeWriter:
    def __init__(self) -> None:
        self.writes: list[Write] = []

    def apply(self, writes: Sequence[Write]) -> WriteResult:
        self.writes.extend(writes)
        return WriteResult(applied=tuple(w.job_id for w in writes))

    def run_lines(self, lines: Sequence[str]) -> tuple[dict[str, str], list[str]]:
        return {}, []


class Recorder:
    """An observer that remembers what it was told, and can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.cycles: list[CycleReport] = []
        self.errors: list[Exception] = []
        self.closed = 0

    def on_cycle(self, report: CycleReport) -> None:
        self.cycles.append(report)
        if self.fail:
            raise RuntimeError("observer broke on a cycle")

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)
        if self.fail:
            raise RuntimeError("observer broke on an error")

    def close(self) -> None:
        self.closed += 1


def make_service(
    tmp_path: Path,
    source: FakeSource,
    *,
    config: Config | None = None,
    observers: Sequence[CycleObserver] = (),
    load: Callable[[], Config] | None = None,
    **kwargs: Any,
) -> Service:
    config = config or Config(interval=60, resources=("cpu", "mem"), state_dir=str(tmp_path / "state"))
    writer = FakeWriter()
    return Service(
        config,
        StateStore(config.state_dir),
        options=ServiceOptions(load=load, keep_log_level=True),
        parts=ServiceParts(lambda c: source, lambda source: writer, lambda c: list(observers)),
        **kwargs,
    )


def write_config(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def wait_for(predicate: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
    return polling.wait_for(predicate, timeout, what, interval=0.01)


def run_in_main_thread(service: Service, driver: Callable[[], None]) -> int:
    """service.run() here (signals need the main thread); `driver` in a thread; both must end."""
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            driver()
        except BaseException as error:  # reported by the test
            failure.append(error)
            service.request_stop()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    code = service.run()
    thread.join(TIMEOUT)
    if failure:
        raise failure[0]
    return code


# ---------------------------------------------------------------------------
# Backoff
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "interval", "expected"),
    [
        (1, 60, 60),  # the first failure: the normal schedule
        (2, 60, 120),  # then two intervals
        (7, 60, 120),  # and no more: Slurm's return is seen within two intervals
        (2, 400, 600),  # capped at ten minutes
        (3, 900, 900),  # unless the interval itself is longer
        (2, 2, 4),
    ],
)
def test_error_delay(failures: int, interval: float, expected: float) -> None:
    assert compute_error_delay(failures, interval) == expected


def test_error_delays_kopf_style_sequence_repeats_its_last() -> None:
    delays = (1, 2, 4, 8)
    assert [compute_error_delay(n, 10, delays, cap=50) for n in range(1, 7)] == [10, 20, 40, 50, 50, 50]
    assert ERROR_DELAYS[0] == 1


def test_slurm_errors_back_off_and_recover(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    down = SlurmReadError("squeue --json: exit status 1: Unable to contact slurm controller")
    source = FakeSource([down, down, down, cluster()])
    recorder = Recorder()
    service = make_service(
        tmp_path,
        source,
        config=Config(interval=5, resources=("cpu", "mem"), state_dir=str(tmp_path / "state")),
        observers=[recorder],
    )
    caplog.set_level(logging.INFO, logger="slurm_drf")
    delays = [service.run_once() for _ in range(4)]
    assert delays == [5, 10, 10, None]
    assert service.failures == 0
    assert recorder.errors == [down, down, down] and len(recorder.cycles) == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "slurm_drf.service.loop"]
    assert messages[0] == (
        "cycle 1 failed: slurm read: squeue --json: exit status 1: Unable to contact slurm "
        "controller; next attempt in 5 s"
    )
    assert messages[2].endswith("next attempt in 10 s (3 failed in a row)")
    assert messages[3].startswith("cycle 4: 2 accounts, 2 pending jobs, wrote 2 value(s) in ")
    assert messages[3].endswith("(recovered after 3 failed cycle(s))")


def test_unexpected_errors_do_not_end_the_service(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource([ZeroDivisionError("a bug"), cluster()])
    service = make_service(tmp_path, source)
    assert service.run_once() == 60
    assert service.run_once() is None
    bug = next(r for r in caplog.records if "a bug" in r.getMessage())
    assert bug.levelno == logging.ERROR and bug.exc_info is not None  # a traceback for the unexpected


def test_backoff_moves_the_scheduled_start(tmp_path: Path) -> None:
    down = SlurmReadError("slurmctld is down")
    source = FakeSource([down, down, down, cluster()])
    service = make_service(
        tmp_path, source, config=Config(interval=0.3, resources=("cpu", "mem"), state_dir=str(tmp_path / "state"))
    )

    def driver() -> None:
        wait_for(lambda: source.calls >= 4 and service.failures == 0, "recovery")
        service.request_stop()

    assert run_in_main_thread(service, driver) == 0
    gaps = [b - a for a, b in itertools.pairwise(source.started)]
    # After the first failure the normal interval, then two intervals.
    assert gaps[0] >= 0.25
    assert gaps[1] >= 0.55 and gaps[2] >= 0.55


# ---------------------------------------------------------------------------
# Scheduling and signals
# ---------------------------------------------------------------------------


def test_a_slow_cycle_delays_the_next_instead_of_overlapping(tmp_path: Path) -> None:
    source = FakeSource(before=lambda call: time.sleep(0.5 if call <= 2 else 0))
    service = make_service(
        tmp_path, source, config=Config(interval=0.1, resources=("cpu", "mem"), state_dir=str(tmp_path / "state"))
    )

    def driver() -> None:
        wait_for(lambda: service.cycles >= 4 and service._cycle_started is None, "four cycles")
        service.request_stop()

    assert run_in_main_thread(service, driver) == 0
    assert source.most_running == 1
    gaps = [b - a for a, b in itertools.pairwise(source.started)]
    assert gaps[0] >= 0.5 and gaps[1] >= 0.5  # each start waited for the slow cycle


def test_sigterm_finishes_the_running_cycle_then_exits_0(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    in_cycle = threading.Event()
    release = threading.Event()

    def block(call: int) -> None:
        in_cycle.set()
        assert release.wait(TIMEOUT)

    source = FakeSource(before=block)
    service = make_service(tmp_path, source)
    caplog.set_level(logging.INFO, logger="slurm_drf")

    def driver() -> None:
        assert in_cycle.wait(TIMEOUT)
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(
            lambda: any("stopping after the current cycle" in r.getMessage() for r in caplog.records),
            "the stop to be noticed",
        )
        release.set()

    assert run_in_main_thread(service, driver) == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "slurm_drf.service.loop"]
    stop = messages.index("stopping after the current cycle")
    finished = next(i for i, m in enumerate(messages) if m.startswith("cycle 1: "))
    assert stop < finished  # the cycle went on after SIGTERM and completed
    assert messages[-1] == "stopped on SIGTERM after 1 cycle(s)"
    assert parse_state(json.loads((tmp_path / "state" / "state.json").read_text())).jobs  # it saved


def test_sigint_stops_like_sigterm(tmp_path: Path) -> None:
    source = FakeSource()
    service = make_service(tmp_path, source)

    def driver() -> None:
        wait_for(lambda: service.cycles >= 1 and service._cycle_started is None, "a cycle")
        os.kill(os.getpid(), signal.SIGINT)

    assert run_in_main_thread(service, driver) == 0


def test_signal_handlers_are_restored(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    service = make_service(tmp_path, FakeSource())

    def driver() -> None:
        wait_for(lambda: service.cycles, "a cycle")
        service.request_stop()

    assert run_in_main_thread(service, driver) == 0
    assert {s: signal.getsignal(s) for s in before} == before


# ---------------------------------------------------------------------------
# Reload
# ---------------------------------------------------------------------------


GOOD = "interval: 60s\nresources: [cpu, mem]\naccounts:\n  physics: {weight: 2}\n"
BAD = "interval: 60s\nresources: [cpu, mem]\naccounts:\n  physics: {weight: -1}\n"


def test_reload_keeps_the_last_good_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slurm_drf")
    path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(path), {}, str(tmp_path / "state"))
    service = make_service(tmp_path, FakeSource(), config=load(), load=load)
    good = service.config
    assert good.weights["physics"] == 2

    write_config(path, BAD)
    assert service.reload() is False
    assert service.config is good
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[0].startswith(f"{path}:4: accounts.physics.weight: ")
    assert errors[-1] == "reload failed (1 problem(s)): running on with the last good configuration"

    write_config(path, GOOD.replace("weight: 2", "weight: 3"))
    assert service.reload() is True
    assert service.config.weights["physics"] == 3
    assert service.config.state_dir == str(tmp_path / "state")  # --state-dir still wins
    assert "changed weights" in caplog.records[-1].getMessage()


def test_reload_keeps_the_state_directory_until_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD + f"state_dir: {tmp_path / 'one'}\n")
    load = config_loader(str(path), {})
    service = make_service(tmp_path, FakeSource(), config=load(), load=load)
    write_config(path, GOOD.replace("weight: 2", "weight: 3") + f"state_dir: {tmp_path / 'two'}\n")
    assert service.reload() is True
    assert service.config.state_dir == str(tmp_path / "one")  # the lock is held there
    assert service.config.weights["physics"] == 3
    assert f"state_dir changed to {tmp_path / 'two'}: the daemon keeps {tmp_path / 'one'} until it is restarted" in [
        r.getMessage() for r in caplog.records
    ]


def test_reload_logs_a_history_pruned_before_its_past_fades(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(path), {}, str(tmp_path / "state"))
    service = make_service(tmp_path, FakeSource(), config=load(), load=load)
    write_config(path, GOOD + "retention_days: 7\nhistory: {half_life: 7d}\n")
    assert service.reload() is True
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    shorter = "retention_days: 7 day(s) is shorter than 3 half-lives"
    assert any(w.startswith(f"{path}:") and shorter in w for w in warned)


def test_reload_refuses_a_file_others_can_write(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(path), {})
    service = make_service(tmp_path, FakeSource(), config=load(), load=load)
    path.chmod(0o666)
    assert service.reload() is False
    assert service.config.weights["physics"] == 2


def test_reload_applies_to_the_next_cycle_and_rebuilds_observers(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(path), {}, str(tmp_path / "state"))
    built: list[Recorder] = []

    def observers(config: Config) -> list[CycleObserver]:
        built.append(Recorder())
        return [built[-1]]

    source = FakeSource()
    service = Service(
        load(),
        StateStore(tmp_path / "state"),
        options=ServiceOptions(load=load, keep_log_level=True),
        parts=ServiceParts(lambda c: source, lambda source: FakeWriter(), observers),
    )
    service.run_once()
    first = built[0].cycles[0].plan
    assert {a.account: a.weight for a in first.accounts}["physics"] == 2
    service.reload()  # same file: no rebuild
    service.run_once()
    assert len(built) == 1
    write_config(path, GOOD.replace("weight: 2", "weight: 5"))
    service.reload()
    service.run_once()
    assert len(built) == 2 and built[0].closed == 1
    assert {a.account: a.weight for a in built[1].cycles[0].plan.accounts}["physics"] == 5


def test_reload_rebuilds_the_source_when_slurm_timeout_changes(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(path), {}, str(tmp_path / "state"))
    built: list[float] = []

    def source(config: Config) -> FakeSource:
        built.append(config.slurm_timeout)
        return FakeSource()

    service = Service(
        load(),
        StateStore(tmp_path / "state"),
        options=ServiceOptions(load=load, keep_log_level=True),
        parts=ServiceParts(source, lambda source: FakeWriter(), lambda c: []),
    )
    service.run_once()
    write_config(path, GOOD.replace("weight: 2", "weight: 5"))
    service.reload()
    service.run_once()  # another key: the source is kept
    write_config(path, GOOD + "slurm_timeout: 5m\n")
    service.reload()
    service.run_once()
    assert built == [120.0, 300.0]


def test_sighup_reloads_and_reschedules(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD.replace("60s", "1h"))
    load = config_loader(str(path), {}, str(tmp_path / "state"))
    source = FakeSource()
    service = make_service(tmp_path, source, config=load(), load=load)

    def driver() -> None:
        wait_for(lambda: service.cycles == 1 and service._cycle_started is None, "the first cycle")
        write_config(path, GOOD.replace("60s", "1s").replace("weight: 2", "weight: 7"))
        os.kill(os.getpid(), signal.SIGHUP)
        # Without the new interval the next cycle would be an hour away.
        wait_for(lambda: service.cycles >= 2, "a cycle at the new interval")
        service.request_stop()

    assert run_in_main_thread(service, driver) == 0
    assert service.config.weights["physics"] == 7
    assert service.config.interval == 1


# ---------------------------------------------------------------------------
# Observers
# ---------------------------------------------------------------------------


def test_an_observer_that_raises_is_logged_never_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken, fine = Recorder(fail=True), Recorder()
    source = FakeSource([cluster(), SlurmReadError("down"), cluster()])
    service = make_service(tmp_path, source, observers=[broken, fine])
    assert [service.run_once() for _ in range(3)] == [None, 60, None]
    assert len(fine.cycles) == 2 and len(fine.errors) == 1
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (
        "observer Recorder.on_cycle failed (the cycle is not affected): RuntimeError: observer broke on a cycle"
        in logged
    )
    assert (
        "observer Recorder.on_error failed (the cycle is not affected): RuntimeError: observer broke on an error"
        in logged
    )


def test_observers_that_cannot_start_do_not_stop_the_cycle(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def observers(config: Config) -> list[CycleObserver]:
        raise OSError(98, "Address already in use")

    writer = FakeWriter()
    config = Config(resources=("cpu", "mem"), state_dir=str(tmp_path / "state"))
    service = Service(
        config,
        StateStore(config.state_dir),
        options=ServiceOptions(keep_log_level=True),
        parts=ServiceParts(lambda c: FakeSource(), lambda source: writer, observers),
    )
    assert service.run_once() is None
    assert writer.writes
    assert any("observers (audit, metrics, reports) not started: OSError" in r.getMessage() for r in caplog.records)


def test_unknown_accounts_warn_once_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD + "  ghost: {weight: 3}\n")
    config = load_config(path)
    service = make_service(tmp_path, FakeSource(), config=config)
    for _ in range(3):
        service.run_once()
    warnings = [r.getMessage() for r in caplog.records if "Slurm has no account" in r.getMessage()]
    assert warnings == [
        f"{path}:5: accounts.ghost: Slurm has no account 'ghost'; the setting has no effect until it exists"
    ]


# ---------------------------------------------------------------------------
# sd_notify
# ---------------------------------------------------------------------------


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    # AF_UNIX paths are limited to 107 bytes; pytest's tmp_path may be longer.
    path = tmp_path / "notify"
    if len(str(path)) > 100:
        path = Path("/tmp") / f"drf-notify-{uuid.uuid4().hex[:8]}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(TIMEOUT)
    try:
        yield sock, str(path)
    finally:
        sock.close()
        path.unlink(missing_ok=True)


def receive(sock: socket.socket, until: Callable[[list[str]], bool]) -> list[str]:
    messages: list[str] = []
    while not until(messages):
        messages.append(sock.recv(4096).decode())
    return messages


def test_addresses_and_watchdog_environment() -> None:
    assert parse_notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert parse_notify_address("@abstract/name") == "\0abstract/name"
    assert parse_notify_address("vsock:2:1234") is None
    assert parse_notify_address("") is None
    assert parse_watchdog_seconds({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert parse_watchdog_seconds({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 30.0
    assert parse_watchdog_seconds({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert parse_watchdog_seconds({"WATCHDOG_USEC": "soon"}) is None
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1000000", "PATH": "/bin"}
    notifier = Notifier.from_environment(env)
    assert (notifier.address, notifier.watchdog_seconds) == ("/run/x", 1.0)
    assert env == {"PATH": "/bin"}  # the Slurm commands we run must not notify systemd


def test_no_notify_socket_means_silence() -> None:
    notifier = Notifier.from_environment({})
    assert not notifier.enabled
    assert notifier.notify("READY=1") is False


def test_an_unreachable_socket_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier(str(tmp_path / "nobody"))
    assert notifier.notify("READY=1") is False
    assert notifier.notify("WATCHDOG=1") is False
    assert len([r for r in caplog.records if "sd_notify" in r.getMessage()]) == 1


def test_abstract_socket_datagram() -> None:
    name = f"slurm-drf-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(TIMEOUT)
        notifier = Notifier.from_environment({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready("cycle 1: fine\nreally")
        assert sock.recv(4096) == b"READY=1\nSTATUS=cycle 1: fine really"


def test_daemon_datagrams_ready_status_watchdog_stopping(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})
    source = FakeSource()
    service = make_service(tmp_path, source, notifier=notifier)  # interval 60 s: one cycle
    seen: list[str] = []

    def driver() -> None:
        # The main loop feeds the watchdog at half of WATCHDOG_USEC between cycles.
        seen.extend(receive(sock, lambda m: sum(x == "WATCHDOG=1" for x in m) >= 3))
        os.kill(os.getpid(), signal.SIGTERM)
        seen.extend(receive(sock, lambda m: bool(m) and m[-1].startswith("STOPPING=1")))

    assert run_in_main_thread(service, driver) == 0
    ready = seen[0].split("\n")
    assert ready[0] == "READY=1"
    assert ready[1].startswith("STATUS=cycle 1: 2 accounts, 2 pending jobs, wrote 2 value(s) in ")
    assert ready[2] == "WATCHDOG=1"
    assert seen[1:4] == ["WATCHDOG=1"] * 3
    assert seen[-1] == "STOPPING=1\nSTATUS=stopping"


def test_failed_cycles_still_signal_ready_and_report_status(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    source = FakeSource([SlurmReadError("slurmctld is down"), cluster()])
    service = make_service(tmp_path, source, notifier=Notifier(path))
    service.run_once()
    assert sock.recv(4096).decode() == (
        "READY=1\nSTATUS=cycle 1 failed: slurm read: slurmctld is down; next attempt in 60 s\nWATCHDOG=1"
    )
    service.run_once()
    message = sock.recv(4096).decode()
    assert message.startswith("STATUS=cycle 2: ") and message.endswith("\nWATCHDOG=1")


def test_reload_notifies_reloading_then_ready(tmp_path: Path, notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    config_path = write_config(tmp_path / "config.yaml", GOOD)
    load = config_loader(str(config_path), {})
    service = make_service(tmp_path, FakeSource(), config=load(), load=load, notifier=Notifier(path))
    service.reload()
    reloading = sock.recv(4096).decode().split("\n")
    assert reloading[0] == "RELOADING=1" and reloading[1].startswith("MONOTONIC_USEC=")
    assert sock.recv(4096).decode().startswith("READY=1\nSTATUS=reloaded ")


# ---------------------------------------------------------------------------
# One daemon per state directory, the state file, the config file
# ---------------------------------------------------------------------------


HOLD_LOCK = """
import sys
from slurm_drf.cycle.store import StateStore
store = StateStore(sys.argv[1])
store.lock()
print("locked", flush=True)
sys.stdin.read()
"""


def daemon_args(**overrides: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"config": None, "state_dir": None, "dry_run": False, "debug": False, "quiet": False}
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.fixture
def sigterm_later() -> Iterator[None]:
    """Should cmd_daemon wrongly start serving, stop it: the test then fails instead of hanging."""
    timer = threading.Timer(TIMEOUT, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    yield
    timer.cancel()


@pytest.mark.usefixtures("sigterm_later")
def test_a_second_daemon_on_one_state_directory_refuses(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", GOOD)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(state)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(StateError) as caught:
            cmd_daemon(daemon_args(config=str(config), state_dir=str(state)))
        assert str(caught.value) == (
            f"{state}/lock: another slurm-drf (pid {holder.pid}) already uses this state directory"
        )
        assert not isinstance(caught.value, InputError)  # exit 1, not 2
    finally:
        holder.communicate("", timeout=TIMEOUT)
    # The lock dies with its process: the directory is free again.
    store = StateStore(state)
    store.lock()
    store.unlock()


@pytest.mark.usefixtures("sigterm_later")
def test_a_bad_start_up_config_is_an_input_error(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", BAD)
    with pytest.raises(ConfigError) as caught:
        cmd_daemon(daemon_args(config=str(config), state_dir=str(tmp_path / "state")))
    assert caught.value.problems[0].startswith(f"{config}:4: accounts.physics.weight:")
    assert not (tmp_path / "state").exists()  # refused before touching anything


def test_a_corrupt_state_file_is_logged_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    (state / "state.json").write_text('{"format": "slurm-drf-state/1", "jobs": [', encoding="utf-8")
    (state / "state.json").chmod(0o640)
    service = make_service(tmp_path, FakeSource())
    assert service.run_once() is None
    assert any("state is corrupt" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    rebuilt = parse_state(json.loads((state / "state.json").read_text(encoding="utf-8")))
    assert set(rebuilt.jobs) == {"2", "3"}


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_config_file_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD, mode)
    with pytest.raises(ConfigError) as caught:
        load_config(path, private=True)
    assert str(caught.value).startswith(f"{path}: the config file is writable by group or others (mode -rw")
    assert str(caught.value).endswith(f"; run: chmod go-w {path}")
    assert load_config(path).weights["physics"] == 2  # only the writing verbs ask


def test_a_config_file_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "config.yaml", GOOD)
    assert load_config(path, private=True).weights["physics"] == 2  # our own file is fine
    if os.geteuid() == 0:
        os.chown(path, 12345, 12345)
        owner, reader = 12345, 0
    else:
        owner, reader = path.stat().st_uid, path.stat().st_uid + 1
        monkeypatch.setattr(os, "geteuid", lambda: reader)  # someone else reads it
    with pytest.raises(ConfigError) as caught:
        load_config(path, private=True)
    assert str(caught.value) == (
        f"{path}: the config file is owned by uid {owner}, neither root nor this user "
        f"(uid {reader}); run: chown root {path}"
    )
