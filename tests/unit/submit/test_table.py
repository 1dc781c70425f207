"""The table on disk: read strictly, at most once a second, and any fault in it leaves every job unchanged."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from slurm_drf.config.settings import Config
from slurm_drf.policy.placement import Placer, build_table
from slurm_drf.policy.plan import compute_plan
from tests.unit.builders import job, node, snapshot
from tests.unit.submit.lua import NICE_OFFSET, LuaValue, answers, logs, run
from tests.unit.submit.tables import GPU_DEMAND, PARTS, STALE_AFTER, WRITTEN, gpu_job, pool, table, text

NOW = int(WRITTEN) + 10
GOOD = text(table(pool(levels=(0.1, 0.2), values=(-3000, -2000)), pool(name="small", partitions=("debug",))))
LINES = GOOD.splitlines()
MAX_BYTES = 4 * 1024 * 1024


def _edit(old: str, new: str) -> str:
    """GOOD with one line (or run of lines) replaced."""
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_the_daemons_table_is_read(lua: str, tmp_path: Path) -> None:
    got = answers(run(lua, {"steps": [{"op": "parse", "id": "p", "text": GOOD}]}, tmp_path))
    assert got["p"] == ["ok", "nice", "2", "2"]


def test_a_table_of_a_real_plan_is_read_and_placed_with_as_the_python_placer_does(lua: str, tmp_path: Path) -> None:
    config = Config(resources=("cpu", "mem", "gres/gpu"), hierarchy="flat", weights={"vision": Fraction(2)})
    jobs = [job("vision", state="RUNNING", cpu=8, mem=64_000, gpu=4)]
    jobs += [job(("vision", "nlp")[k % 2], submit_time=float(k), cpu=8, mem=64_000, gpu=1) for k in range(30)]
    nodes = [node(f"g{i}", cpu=64, mem=512_000, gpu=8) for i in range(4)]
    placement = build_table(compute_plan(snapshot(nodes, jobs), config), config, float(NOW))
    path = tmp_path / "placement.txt"
    path.write_text(text(placement), encoding="ascii")
    accounts = ["nlp", "vision", "physics", "vision", "nlp", "vision"]
    steps: list[LuaValue] = [
        {"op": "place", "id": str(k), "job": gpu_job(a, partition="main"), "parts": {"main": PARTS["gpu"]}}
        for k, a in enumerate(accounts)
    ]
    got = answers(run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path))
    placer = Placer(placement)
    for k, account in enumerate(accounts):
        value = placer.place(["main"], account, GPU_DEMAND)
        assert value is not None
        assert got[str(k)] == ["-", f"nice={NICE_OFFSET + value}"]


BROKEN = {
    "empty": "",
    "unknown version": GOOD.replace("slurm-drf-placement/1", "slurm-drf-placement/2", 1),
    "cut short": GOOD[: len(GOOD) // 2],
    "no last line end": GOOD[:-1],
    "no end": GOOD[: GOOD.index("end ")],
    "wrong count": _edit(LINES[-1], "end " + str(len(LINES))),
    "a line after end": GOOD + "point 1 -1\n",
    "a point after end": text(table(pool(levels=(0.1,), values=(-5,)))) + "point 1 -1\n",
    "garbled line": _edit("gap 10\n", "gap 10\nhello world\n"),
    "two spaces": _edit("pool main", "pool  main"),
    "a trailing space": _edit("default_weight 1\n", "default_weight 1 \n"),
    "a tab": _edit("pool main", "pool\tmain"),
    "crlf": GOOD.replace("\n", "\r\n"),
    "an empty line": _edit("pool small\n", "\npool small\n"),
    "not ascii": _edit("pool small", "pool smäll"),
    "nan level": _edit("point 0.1 -3000", "point nan -3000"),
    "infinite level": _edit("point 0.1 -3000", "point 1e999 -3000"),
    "nan written": _edit(f"written {int(WRITTEN)}", "written nan"),
    "a fraction as a value": _edit("point 0.2 -2000", "point 0.2 -2000.5"),
    "levels decrease": _edit("point 0.2 -2000", "point 0.05 -2000"),
    "values turn back": _edit("point 0.2 -2000", "point 0.2 -4000"),
    "capacity too short": _edit("capacity 256 2048000 32", "capacity 256 2048000"),
    "usage too long": _edit("account nlp 1 16 128000 4", "account nlp 1 16 128000 4 5"),
    "weight zero": _edit("account nlp 1 ", "account nlp 0 "),
    "negative weight": _edit("account nlp 1 ", "account nlp -1 "),
    "negative usage": _edit("account nlp 1 16 ", "account nlp 1 -16 "),
    "account twice": _edit("account vision 2", "account nlp 2"),
    "excluded and listed": _edit("exclude ops", "exclude nlp"),
    "gap zero": _edit("gap 10", "gap 0"),
    "a partition in two pools": _edit("partitions debug", "partitions gpu"),
    "pool twice": _edit("pool small", "pool main"),
    "a pool lacking a line": _edit("range -1000000 -1\ngap 10\naccount nlp", "range -1000000 -1\naccount nlp"),
    "lines out of order": _edit(
        "exclude ops\npoint 0.1 -3000\npoint 0.2 -2000", "point 0.1 -3000\nexclude ops\npoint 0.2 -2000"
    ),
    "a bad name": _edit("account nlp", "account n/p"),
    "unknown mode": _edit("mode nice", "mode priority_tier"),
    "a pool in priority mode": _edit("mode nice", "mode priority"),
    "stale_after negative": _edit("stale_after 180", "stale_after -1"),
    "a huge integer": _edit("capacity 256", "capacity 99999999999999999999"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_broken_table_is_refused_naming_the_line(lua: str, tmp_path: Path, broken: str) -> None:
    got = answers(run(lua, {"steps": [{"op": "parse", "id": "p", "text": BROKEN[broken]}]}, tmp_path))
    assert got["p"][0] == "nil", got["p"]
    reason = got["p"][1]
    assert reason.startswith("line ") and "\n" not in reason


def test_a_priority_table_is_read_and_places_nothing(lua: str, tmp_path: Path) -> None:
    priority = text(table(mode="priority"))
    path = tmp_path / "placement.txt"
    path.write_text(priority, encoding="ascii")
    steps: list[LuaValue] = [
        {"op": "parse", "id": "p", "text": priority},
        {"op": "place", "id": "j", "job": gpu_job(), "parts": PARTS},
    ]
    lines = run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path)
    assert answers(lines)["p"] == ["ok", "priority", "0", "0"]
    assert answers(lines)["j"] == ["-", "unchanged"] and logs(lines) == []


FILES = {
    "missing": None,
    "empty": "",
    "cut short": GOOD[: len(GOOD) // 2],
    "wrong count": BROKEN["wrong count"],
    "garbled line": BROKEN["garbled line"],
    "nan level": BROKEN["nan level"],
    "unknown version": BROKEN["unknown version"],
    "stale": text(table(pool(), written=float(NOW - STALE_AFTER - 1))),
    "binary": "\x00\x01garbage" * 10,
}


@pytest.mark.parametrize("broken", list(FILES))
def test_a_job_is_left_unchanged_and_the_fault_logged_once_a_minute(lua: str, tmp_path: Path, broken: str) -> None:
    path = tmp_path / "placement.txt"
    content = FILES[broken]
    if content is not None:
        path.write_bytes(content.encode("latin-1"))
    steps: list[LuaValue] = [
        {"op": "place", "id": f"j{t}", "job": gpu_job(), "parts": PARTS, "time": NOW + t} for t in (0, 0, 1, 30, 59)
    ]
    steps.append({"op": "place", "id": "late", "job": gpu_job(), "parts": PARTS, "time": NOW + 60})
    lines = run(lua, {"configure": {"table": str(path)}, "steps": steps}, tmp_path)
    lines = [line for line in lines if line[0] not in ("configure", "globals")]
    assert all(line[1:] == ["-", "unchanged"] for line in lines if line[0] != "log")
    # Logged before the first job and again a minute later, not in between.
    assert [line[0] for line in lines] == ["log", "j0", "j0", "j1", "j30", "j59", "log", "late"]
    level = "info" if broken in ("missing", "stale") else "error"
    assert [entry[0] for entry in logs(lines)] == [level, level]


def test_a_table_past_the_size_cap_is_not_read(lua: str, tmp_path: Path) -> None:
    path = tmp_path / "placement.txt"
    head = GOOD[: GOOD.index("pool main")]
    padding = "point 0 -1\n" * (MAX_BYTES // 11 + 1)
    path.write_text(head + "pool main\n" + padding, encoding="ascii")
    steps: list[LuaValue] = [
        {"op": "place", "id": "j", "job": gpu_job(), "parts": PARTS},
        {"op": "counters", "id": "c"},
    ]
    lines = run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path)
    assert answers(lines)["j"] == ["-", "unchanged"]
    assert answers(lines)["c"] == ["1", "0"]  # opened, never parsed
    ((level, message),) = logs(lines)
    assert level == "error" and "larger than 4194304 bytes" in message


def test_a_table_just_under_the_size_cap_is_read_and_used(lua: str, tmp_path: Path) -> None:
    path = tmp_path / "placement.txt"
    head = GOOD[: GOOD.index("pool small")]
    body = head + "point 9 -10\n" * ((MAX_BYTES - len(head) - 20) // 12)
    path.write_text(body + f"end {body.count(chr(10))}\n", encoding="ascii")
    assert MAX_BYTES - 100 < path.stat().st_size <= MAX_BYTES
    steps: list[LuaValue] = [{"op": "place", "id": "j", "job": gpu_job(), "parts": PARTS}]
    lines = run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path)
    assert answers(lines)["j"] == ["-", f"nice={NICE_OFFSET - 2000 + 10}"] and logs(lines) == []


def test_the_header_is_read_once_a_second_and_the_whole_file_only_when_written_changed(
    lua: str, tmp_path: Path
) -> None:
    path = tmp_path / "placement.txt"
    first = table(pool(levels=(0.5,), values=(-500,)))
    newer = table(pool(levels=(0.5,), values=(-500,), best=-2_000_000), written=WRITTEN + 1)
    path.write_text(text(first), encoding="ascii")
    steps: list[LuaValue] = [{"op": "place", "id": f"a{k}", "job": gpu_job(), "parts": PARTS} for k in range(50)]
    steps += [
        {"op": "counters", "id": "after a burst"},
        {"op": "place", "id": "b", "job": gpu_job(), "parts": PARTS, "time": NOW + 1},
        {"op": "counters", "id": "a second later"},
        {"op": "write", "path": str(path), "text": text(newer)},
        {"op": "place", "id": "c", "job": gpu_job("physics"), "parts": PARTS},
        {"op": "counters", "id": "in the same second"},
        {"op": "place", "id": "d", "job": gpu_job("physics"), "parts": PARTS, "time": NOW + 2},
        {"op": "counters", "id": "the next second"},
        {"op": "write", "path": str(path), "text": BROKEN["garbled line"]},
        {"op": "place", "id": "e", "job": gpu_job(), "parts": PARTS, "time": NOW + 3},
        {"op": "place", "id": "f", "job": gpu_job(), "parts": PARTS, "time": NOW + 4},
        {"op": "counters", "id": "a broken table read once"},
    ]
    got = answers(run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path))
    placer = Placer(first)
    for _ in range(51):
        placer.place(["gpu"], "vision", GPU_DEMAND)
    physics = placer.place(["gpu"], "physics", GPU_DEMAND)
    assert physics is not None
    assert got["after a burst"] == ["1", "1"]
    assert got["a second later"] == ["2", "1"]
    assert got["in the same second"] == ["2", "1"]
    assert got["c"] == ["-", f"nice={NICE_OFFSET + physics}"]  # still the first table
    assert got["the next second"] == ["3", "2"]
    assert got["d"] == ["-", f"nice={NICE_OFFSET - 2_000_000 + 10}"]
    assert got["a broken table read once"] == ["5", "3"]  # same `written`: not parsed again
    assert got["e"] == got["f"] == ["-", "unchanged"]


def test_configure_refuses_what_it_does_not_know_without_raising(lua: str, tmp_path: Path) -> None:
    cases: list[tuple[dict[str, LuaValue], list[str]]] = [
        ({"table": str(tmp_path / "placement.txt"), "def_mem_per_cpu": 1000}, ["true"]),
        ({"tabel": "placement.txt"}, ["false", "unknown setting tabel"]),
        ({"def_mem_per_cpu": -1}, ["false", "def_mem_per_cpu: expected MiB, a whole number >= 0"]),
    ]
    for settings, answer in cases:
        lines = run(lua, {"configure": settings, "steps": []}, tmp_path)
        assert [line for line in lines if line[0] == "configure"] == [["configure", *answer]]
        assert [level for level, _ in logs(lines)] == ([] if answer == ["true"] else ["error"])
