"""Observability against the real thing: Slurm, a browser, an HTTP scrape.

- The HTML report of a known snapshot opened in headless Chromium (Debian's
  `chromium`): the screenshot shows the chart (bars in the resource colours,
  at the right scale) above the table (header band, highlighted dominant
  cells).
- After live cycles against the sandbox, the history holds every value
  Slurm received: each of the test's pending jobs has in Slurm exactly the
  nice its last applied write recorded (and 0 when it was never written).
- Metrics scraped over HTTP while cycles run parse with Prometheus' text
  parser and agree with the plan, and with shares computed here from
  squeue's own allocations.
- `report` and `explain` read the live cluster.

Cycles are run with `run_cycle` and the observers called as the service
loop calls them. The cycles write to every pending job in the sandbox, so,
like the other live tests that fill the node, these expect a queue of their
own (docs/sandbox.md, isolated run).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pytest

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import CycleObserver, CycleReport, run_cycle
from slurm_drf.cycle.store import StateStore
from slurm_drf.slurm.cli_source import CliSource
from slurm_drf.slurm.write import ScontrolWriter
from slurm_drf.trail.audit_query import AuditQuery, query_history
from slurm_drf.trail.history_db import AuditRecorder, history_path, open_history_readonly
from slurm_drf.trail.prometheus import MetricsRecorder
from slurm_drf.trail.share_report import RESOURCE_COLOURS, TABLE_HEADER_COLOUR, render_report
from tests.helpers import SampleKey, load_report_plan, parse_samples, run_observe_verb

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

CAPACITY = {"cpu": 64, "mem": 512000, "gres/gpu": 8}
TEAMS = ("gputeam", "memteam", "cputeam", "newteam")


# --------------------------------------------------------------------------
# The HTML report in a real browser


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("SLURM_DRF_REQUIRE_SLURM") == "1":
            pytest.fail("chromium is not installed (Debian package `chromium`; scripts/test installs it)")
        pytest.skip("chromium is not installed (Debian package `chromium`)")
    return found


def decode_png(data: bytes) -> npt.NDArray[np.uint8]:
    """RGB pixels (height, width, 3) of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, chunks, header = 8, [], None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        filter_kind, line = int(raw[y, 0]), raw[y, 1:]
        if filter_kind == 0:  # None
            row = line.copy()
        elif filter_kind == 1:  # Sub: a running sum per channel
            row = (np.cumsum(line.reshape(-1, bpp).astype(np.uint32), axis=0) % 256).astype(np.uint8).reshape(-1)
        elif filter_kind == 2:  # Up
            row = line + previous
        else:  # Average, Paeth: sequential
            row = _unfilter_slow(line, previous, bpp, filter_kind)
        out[y] = row
        previous = row
    return out.reshape(height, width, bpp)[:, :, :3]


def _unfilter_slow(
    line: npt.NDArray[np.uint8], previous: npt.NDArray[np.uint8], bpp: int, kind: int
) -> npt.NDArray[np.uint8]:
    assert kind in (3, 4), f"bad PNG filter {kind}"
    row = bytearray(len(line))
    current, up = line.tolist(), previous.tolist()
    for i, value in enumerate(current):
        a = row[i - bpp] if i >= bpp else 0
        b = up[i]
        if kind == 3:
            row[i] = (value + ((a + b) >> 1)) & 255
            continue
        c = up[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        row[i] = (value + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return np.frombuffer(bytes(row), dtype=np.uint8)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _mask(image: npt.NDArray[np.uint8], colour: str, tolerance: int = 3) -> npt.NDArray[np.bool_]:
    difference = np.abs(image.astype(np.int16) - np.array(_rgb(colour), dtype=np.int16))
    mask: npt.NDArray[np.bool_] = difference.max(axis=2) <= tolerance
    return mask


def _longest_run(mask: npt.NDArray[np.bool_]) -> int:
    """The longest horizontal run of True in any row."""
    best = 0
    for row in mask:
        if not row.any():
            continue
        padded = np.r_[False, row, False].astype(np.int8)
        edges = np.flatnonzero(np.diff(padded))
        best = max(best, int((edges[1::2] - edges[::2]).max()))
    return best


@pytest.fixture(scope="module")
def screenshot(tmp_path_factory: pytest.TempPathFactory) -> npt.NDArray[np.uint8]:
    chromium = _chromium()
    directory = tmp_path_factory.mktemp("html")
    plan, _ = load_report_plan()
    page = directory / "report.html"
    page.write_text(render_report(plan, "html"))
    png = directory / "report.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            # The whole page painted before the screenshot is taken: on a loaded machine chromium took
            # one with the second pool's chart not yet drawn (CI's pyslurm tier; the CLI tier's passed).
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=10000",
            f"--user-data-dir={directory / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    image = decode_png(png.read_bytes())
    assert image.shape == (900, 1200, 3)
    return image


def test_png_decoder_agrees_with_pillow(screenshot: npt.NDArray[np.uint8], tmp_path: Path) -> None:
    image_module = pytest.importorskip("PIL.Image")
    path = tmp_path / "x.png"
    image_module.fromarray(screenshot).save(path)  # Pillow picks its own filters
    assert np.array_equal(decode_png(path.read_bytes()), screenshot)


def test_screenshot_shows_the_chart_above_the_table(screenshot: npt.NDArray[np.uint8]) -> None:
    header = _mask(screenshot, TABLE_HEADER_COLOUR)
    # The table's header row: a band of rows nearly as wide as the page.
    bands = np.flatnonzero(header.sum(axis=1) > 900)
    assert len(bands) >= 20, "no table header band in the screenshot"
    table_top = int(bands[0])
    cpu, mem, gpu = (_mask(screenshot, colour) for colour in RESOURCE_COLOURS[:3])
    above = slice(0, table_top)
    # Bars of every resource colour above the table (the gpu pool's chart) ...
    for name, mask in (("cpu", cpu), ("mem", mem), ("gres/gpu", gpu)):
        assert mask[above].sum() > 1000, f"no {name} bars above the table"
    # ... drawn at scale: the axis ends at 0.40 = 620 px; r&d's mem share 0.4 fills it,
    # physics' GPU share 0.375 takes 581 px (less the dominant outline).
    assert 612 <= _longest_run(mem[above]) <= 622
    assert 572 <= _longest_run(gpu[above]) <= 584
    # Bars start at the axis, right of the account labels.
    columns = np.flatnonzero(gpu[above].any(axis=0))
    assert 185 <= columns[0] <= 200
    # The table: the dominant shares highlighted in three rows under its header.
    dominant = _mask(screenshot, "#fff3bf")
    rows = np.flatnonzero(dominant.sum(axis=1) > 50)
    assert len(rows) and rows[0] > table_top
    runs = np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1)
    assert len(runs) >= 3  # physics gpu, r&d mem, chemistry cpu (newteam has none)
    # Text in the table: dark pixels between the header band and the second pool.
    table_rows = slice(table_top, table_top + 140)
    assert (screenshot[table_rows].max(axis=2) < 90).sum() > 2000
    # The second pool's chart below the first table (cpu pool: cpu and mem only).
    below = slice(table_top + 160, 900)
    assert cpu[below].sum() > 1000 and mem[below].sum() > 1000
    assert gpu[below].sum() == 0


# --------------------------------------------------------------------------
# Live cycles


def _sbatch(slurm: SlurmSandbox, chdir: Path, account: str, *options: str) -> str:
    return slurm.sbatch("-A", account, f"--chdir={chdir}", "--output=/dev/null", *options)


@pytest.fixture
def scene(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[dict[str, list[str]]]:
    """A busy node (three teams running) and a backlog of every team that cannot start."""
    work = tmp_path / "jobs"
    work.mkdir()
    running = [
        _sbatch(slurm, work, "gputeam", "-p", "gpu", "--gres=gpu:4", "-c", "8", "--mem=64000"),
        _sbatch(slurm, work, "memteam", "-p", "gpu", "-c", "4", "--mem=256000"),
        _sbatch(slurm, work, "cputeam", "-p", "cpu", "-c", "32", "--mem=8000"),
    ]
    for job_id in running:
        slurm.wait_for_state(job_id, "RUNNING", timeout=60)
    pending = [
        _sbatch(slurm, work, team, "-p", "gpu" if team != "cputeam" else "cpu", "-c", "48", "--mem=1000")
        for team in TEAMS
        for _ in range(2)
    ]
    for job_id in pending:
        slurm.wait_for_state(job_id, "PENDING", timeout=30)
    yield {"running": running, "pending": pending}


def _config(tmp_path: Path) -> Config:
    return Config(state_dir=str(tmp_path / "state"), backend="cli", resources=("cpu", "mem", "gres/gpu"))


def _nice(slurm: SlurmSandbox) -> dict[str, int]:
    """Job id -> nice, from squeue's text output (signed, unlike 22.05's JSON)."""
    out = slurm.run("squeue", "-h", "-t", "PD", "-o", "%A %y").stdout
    return {job: int(nice) for job, nice in (line.split() for line in out.splitlines())}


def _cycle(config: Config, observers: list[CycleObserver]) -> CycleReport:
    report = run_cycle(CliSource(), ScontrolWriter(), config, StateStore(config.state_dir))
    for observer in observers:
        observer.on_cycle(report)
    return report


def test_history_holds_every_value_slurm_received(
    slurm: SlurmSandbox, scene: dict[str, list[str]], tmp_path: Path
) -> None:
    config = _config(tmp_path)
    recorder = AuditRecorder(config.state_dir, config.retention_days)
    first = _cycle(config, [recorder])
    assert first.result is not None and set(scene["pending"]) <= set(first.result.applied)
    # A user changes their own nice (of their account's last job, so that its order
    # in the account stays): the next cycle rewrites that job, keeping the user's part.
    changed = scene["pending"][1]
    slurm.run("scontrol", "update", f"jobid={changed}", "nice=5")
    second = _cycle(config, [recorder])
    assert second.result is not None and second.result.applied == (changed,)
    # A new job: written by the next cycle.
    extra = _sbatch(slurm, tmp_path / "jobs", "newteam", "-p", "gpu", "-c", "48", "--mem=1000")
    slurm.wait_for_state(extra, "PENDING")
    third = _cycle(config, [recorder])
    assert third.result is not None and extra in third.result.applied
    fourth = _cycle(config, [recorder])  # nothing changed: nothing to write
    assert fourth.writes == ()
    reports = (first, second, third, fourth)

    connection = open_history_readonly(history_path(config.state_dir))
    try:
        writes = query_history(connection, AuditQuery("writes"))
        cycles = query_history(connection, AuditQuery("cycles"))
        shares = query_history(connection, AuditQuery("shares"))
    finally:
        connection.close()
    assert [c["writes_planned"] for c in cycles] == [len(r.writes) for r in reports]
    assert len(writes) == sum(len(r.writes) for r in reports)
    assert {w["outcome"] for w in writes} == {"applied"}
    assert len(shares) == sum(len(r.plan.accounts) for r in reports)
    last: dict[str, dict[str, Any]] = {}
    for write in writes:
        last[write["job"]] = write
    slurm_nice = _nice(slurm)
    mine = [*scene["pending"], extra]
    for job in mine:
        # Slurm holds exactly what the history says was last written; every job was written.
        assert job in last, f"job {job}: no write recorded"
        assert slurm_nice[job] == last[job]["new"], job
    # The user's own nice 5 was kept on top of ours, and recorded as the old value.
    rewritten = [w for w in writes if w["job"] == changed]
    assert rewritten[1]["old"] == 5
    assert rewritten[1]["new"] == rewritten[0]["new"] + 5
    assert rewritten[1]["cycle"] == cycles[1]["cycle"]
    for write in writes:
        assert write["job"] in slurm_nice  # every write went to a pending job
        assert write["mode"] == "nice" and write["level"] is not None


def _scrape(port: int) -> dict[SampleKey, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return parse_samples(response.read().decode())


def _mib(text: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    return round(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _shares_from_squeue(slurm: SlurmSandbox) -> dict[str, float]:
    """Dominant share per account, from the running jobs' tres_alloc_str: computed here, not by slurm_drf."""
    usage: dict[str, dict[str, int]] = {}
    for job in slurm.squeue_json():
        if slurm.job_state(job) != "RUNNING":
            continue
        tres = dict(item.split("=", 1) for item in job["tres_alloc_str"].split(",") if "=" in item)
        account = usage.setdefault(job["account"], dict.fromkeys(CAPACITY, 0))
        account["cpu"] += int(tres.get("cpu", 0))
        account["mem"] += _mib(tres.get("mem", "0"))
        account["gres/gpu"] += int(tres.get("gres/gpu", 0))
    return {a: max(u[r] / CAPACITY[r] for r in CAPACITY) for a, u in usage.items()}


def test_metrics_scraped_during_a_live_run_agree_with_the_plan(
    slurm: SlurmSandbox, scene: dict[str, list[str]], tmp_path: Path
) -> None:
    config = _config(tmp_path)
    metrics = MetricsRecorder(address="127.0.0.1:0")
    metrics.start()
    reports: list[CycleReport] = []
    failures: list[BaseException] = []

    def daemon() -> None:
        try:
            for _ in range(4):
                reports.append(_cycle(config, [metrics]))
                time.sleep(0.3)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    try:
        assert metrics.port is not None
        thread = threading.Thread(target=daemon)
        thread.start()
        seen = []
        while thread.is_alive():
            # Scrapes while cycles run: always a complete, parseable exposition.
            samples = _scrape(metrics.port)
            seen.append(samples[("slurm_drf_cycles_total", ())])
            time.sleep(0.1)
        thread.join()
        assert not failures, failures
        assert seen == sorted(seen) and len(seen) >= 3
        samples = _scrape(metrics.port)
    finally:
        metrics.close()
    plan = reports[-1].plan
    assert samples[("slurm_drf_cycles_total", ())] == 4
    for account in plan.accounts:
        key = (("account", account.account), ("pool", account.pool))
        assert samples[("slurm_drf_weighted_share", key)] == account.weighted_share
        assert samples[("slurm_drf_dominant_share", key)] == account.dominant_share
        assert samples[("slurm_drf_running_jobs", key)] == account.running_jobs
        assert samples[("slurm_drf_pending_jobs", key)] == account.pending_jobs
    assert sum(1 for name, _ in samples if name == "slurm_drf_weighted_share") == len(plan.accounts)
    # And with Slurm itself: one pool holds the whole node.
    for owner, share in _shares_from_squeue(slurm).items():
        assert samples[("slurm_drf_dominant_share", (("account", owner), ("pool", "default")))] == pytest.approx(
            share, rel=1e-12
        )
    owners = {str(job["job_id"]): job["account"] for job in slurm.squeue_json()}
    for team in TEAMS:
        pending = sum(1 for job in scene["pending"] if owners[job] == team)
        assert samples[("slurm_drf_pending_jobs", (("account", team), ("pool", "default")))] >= pending
    written = sum(len(r.result.applied) for r in reports if r.result is not None)
    assert samples[("slurm_drf_writes_total", (("outcome", "applied"),))] == written >= len(scene["pending"])
    assert samples[("slurm_drf_slurm_read_seconds_count", ())] == 4
    assert time.time() - samples[("slurm_drf_last_success_timestamp_seconds", ())] < 60


def test_report_and_explain_read_the_live_cluster(
    slurm: SlurmSandbox, scene: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "config.yaml"
    state_dir = tmp_path / "state"
    config_file.write_text(f"backend: cli\nstate_dir: {state_dir}\n")
    config_file.chmod(0o600)
    assert run_observe_verb(["report", "--config", str(config_file), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (pool,) = data["pools"]
    assert pool["capacity"] == CAPACITY
    accounts = {a["account"]: a for a in pool["accounts"]}
    for account, share in _shares_from_squeue(slurm).items():
        assert accounts[account]["dominant_share"] == pytest.approx(share, rel=1e-12)
    running: dict[str, int] = {}
    for squeue_job in slurm.squeue_json():
        if slurm.job_state(squeue_job) == "RUNNING":
            running[squeue_job["account"]] = running.get(squeue_job["account"], 0) + 1
    assert {a: v["running_jobs"] for a, v in accounts.items() if v["running_jobs"]} == running

    # After a cycle has written, explain says Slurm has the value and nothing is to do.
    _cycle(_config(tmp_path), [])
    job = scene["pending"][-1]
    assert run_observe_verb(["explain", job, "--config", str(config_file), "--format", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["status"] == "ordered" and explained["account"] == "newteam"
    assert explained["current"] == explained["value"] == _nice(slurm)[job]
    assert explained["action"] == "keep"
    assert explained["ahead_total"] == explained["order"]
    assert run_observe_verb(["explain", scene["running"][0], "--config", str(config_file)]) == 0
    assert "running jobs are not ordered" in capsys.readouterr().out
