"""Placing a job with the table: the value the next cycle would give it, as slurm_drf.policy.placement.Placer does."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from slurm_drf.policy.placement import AccountEntry, PlacementTable, Placer, level_of
from tests.unit.submit.lua import NICE_OFFSET, LuaValue, answers, logs, run
from tests.unit.submit.tables import (
    CAPACITY,
    GPU_DEMAND,
    PARTS,
    WRITTEN,
    gpu_job,
    pool,
    table,
    text,
)

NOW = int(WRITTEN) + 10


def _submit(
    lua: str, tmp_path: Path, placement: PlacementTable, jobs: list[dict[str, LuaValue]]
) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Places each job (one `place` step each) with `placement` on disk; the lines of each, and the logs."""
    path = tmp_path / "placement.txt"
    path.write_text(text(placement), encoding="ascii")
    steps: list[LuaValue] = [{"op": "place", "id": f"j{k}", "job": job, "parts": PARTS} for k, job in enumerate(jobs)]
    lines = run(lua, {"time": NOW, "configure": {"table": str(path)}, "steps": steps}, tmp_path)
    got = answers(lines)
    return [got[f"j{k}"] for k in range(len(jobs))], logs(lines)


def _nice(line: list[str]) -> int | None:
    """The value a `place` line wrote to nice (None: unchanged); nothing but nice may be written."""
    assert line[0] == "-"
    if line[1] == "unchanged":
        return None
    key, _, value = line[1].partition("=")
    assert key == "nice", line
    return int(value) - NICE_OFFSET


def test_a_newcomer_goes_first(lua: str, tmp_path: Path) -> None:
    placement = table(pool(levels=(0.125, 0.25, 0.5), values=(-3000, -2000, -1000)))
    (line,), log = _submit(lua, tmp_path, placement, [gpu_job("physics")])
    assert _nice(line) == -1_000_000 + 10 == Placer(placement).place(["gpu"], "physics", GPU_DEMAND)
    assert log == []  # nothing logged on the happy path


def test_placed_as_the_python_placer_places_whatever_the_mix(lua: str, tmp_path: Path) -> None:
    placement = table(
        pool(levels=(0.0, 0.125, 0.125, 0.3, 0.5, 0.75), values=(-900_000, -800_000, -700_000, -600_000, -500, -400)),
        pool(
            name="small",
            partitions=("debug",),
            capacity=(16, 64_000, 0),
            best=-5000,
            gap=100,
            levels=(0.2,),
            values=(-2500,),
        ),
    )
    mix: list[tuple[str, str | None, int, str | None]] = [
        ("vision", None, 1, None),
        ("nlp", "gpu", 2, None),
        ("physics", "cpu", 1, "0-9"),
        ("VISION", "gpu,cpu", 4, None),
        ("ops", None, 1, None),  # excluded
        ("nlp", "debug", 1, None),
        ("nlp", "gpu,debug", 1, None),  # spans two pools
        ("chem", "other", 1, None),  # in no pool
        ("nlp", None, 1, "1,3,5-7%2"),
        ("vision", "debug", 2, None),
        ("vision", None, 1, None),
    ] * 6
    jobs = []
    for account, partition, gpus, array in mix:
        job = gpu_job(account, gpus)
        if partition is not None:
            job["partition"] = partition
        if array is not None:
            job["array_inx"] = array
        jobs.append(job)
    lines, _ = _submit(lua, tmp_path, placement, jobs)
    placer = Placer(placement)
    sizes = {None: 1, "0-9": 10, "1,3,5-7%2": 5}
    for (account, partition, gpus, array), line in zip(mix, lines, strict=True):
        expected = placer.place((partition or "gpu").split(","), account.lower(), (8, 64_000, gpus), sizes[array])
        assert _nice(line) == expected, (account, partition, line)


def _greedy_order(b_levels: list[float], a_levels: list[float]) -> list[str]:
    """The DRF greedy loop over two accounts' jobs: the lower level first, the job already queued on a tie."""
    order, i, j = [], 0, 0
    while i < len(b_levels) or j < len(a_levels):
        if j < len(a_levels) and (i == len(b_levels) or a_levels[j] < b_levels[i]):
            order.append(f"a{j}")
            j += 1
        else:
            order.append(f"b{i}")
            i += 1
    return order


def test_a_burst_interleaves_with_the_others_work_as_the_greedy_loop_orders_it(lua: str, tmp_path: Path) -> None:
    vision = AccountEntry(Fraction(2), (64, 512_000, 16))
    nlp_running = (16, 128_000, 4)
    pending = 60
    b_levels = [
        level_of([u + k * d for u, d in zip(nlp_running, GPU_DEMAND, strict=True)], CAPACITY, Fraction(1))
        for k in range(pending)
    ]
    b_values = [-900_000 + 10_000 * k for k in range(pending)]
    nlp = AccountEntry(Fraction(1), tuple(u + pending * d for u, d in zip(nlp_running, GPU_DEMAND, strict=True)))
    placement = table(pool(levels=b_levels, values=b_values, accounts={"nlp": nlp, "vision": vision}))
    burst = 200
    lines, log = _submit(lua, tmp_path, placement, [gpu_job("vision") for _ in range(burst)])
    values = [_nice(line) for line in lines]
    placer = Placer(placement)
    assert values == [placer.place(["gpu"], "vision", GPU_DEMAND) for _ in range(burst)]

    a_levels = [
        level_of([u + j * d for u, d in zip(vision.usage, GPU_DEMAND, strict=True)], CAPACITY, vision.weight)
        for j in range(burst)
    ]
    expected = _greedy_order(b_levels, a_levels)
    # Slurm's order: the lower nice first, then the earlier submission (nlp's queue came first).
    queue = [(value, k, f"b{k}") for k, value in enumerate(b_values)]
    queue += [(value, pending + j, f"a{j}") for j, value in enumerate(values) if value is not None]
    assert [name for _, _, name in sorted(queue)] == expected
    assert "a0" in expected[: expected.index("b59")] and expected[-1].startswith("a")  # it did interleave
    assert log == []


def test_equal_levels_go_after_every_point_of_their_level(lua: str, tmp_path: Path) -> None:
    # nlp's level is max(16/256, 128000/2048000, 4/32) / 1 = 0.125: after the three points at 0.125.
    placement = table(pool(levels=(0.1, 0.125, 0.125, 0.125, 0.2), values=(-5000, -4000, -3000, -2000, -1000)))
    (line,), _ = _submit(lua, tmp_path, placement, [gpu_job("nlp")])
    assert _nice(line) == -2000 + 10


def test_before_the_first_point_after_the_last_and_in_an_empty_pool(lua: str, tmp_path: Path) -> None:
    for levels, values, account, expected in [
        ((0.5, 0.6), (-50_000, -40_000), "nlp", -1_000_000 + 10),  # below every point: from BEST
        ((0.01, 0.02), (-50_000, -40_000), "nlp", -40_000 + 10),  # above every point: towards WORST
        ((0.01,), (-15,), "nlp", -8),  # no room for two gaps before WORST: the middle
        ((0.01,), (-2,), "nlp", -2),  # none at all: the same value (the next cycle separates them)
        ((), (), "vision", -1_000_000 + 10),  # an empty pool
    ]:
        placement = table(pool(levels=levels, values=values))
        (line,), _ = _submit(lua, tmp_path, placement, [gpu_job(account)])
        assert _nice(line) == expected == Placer(placement).place(["gpu"], account, GPU_DEMAND), (levels, values)


def test_a_place_past_worst_is_left_unchanged_as_the_placer_leaves_it(lua: str, tmp_path: Path) -> None:
    # WORST is the last value the next cycle tells from a user's own nice (-1,000,001 in nice mode): the
    # points above it (a coarse band at the top of the range) leave no value for a job after them.
    placement = table(pool(levels=(0.01,), values=(-1,), best=-2_000_000, worst=-1_000_001))
    (line,), log = _submit(lua, tmp_path, placement, [gpu_job("nlp")])
    assert _nice(line) is None and Placer(placement).place(["gpu"], "nlp", GPU_DEMAND) is None
    assert any("past the last value" in message for _, message in log)
    # Before them there is room: a newcomer is placed as ever.
    (line,), _ = _submit(lua, tmp_path, placement, [gpu_job("physics")])
    assert _nice(line) == -2_000_000 + 10 == Placer(placement).place(["gpu"], "physics", GPU_DEMAND)


def test_site_factor_mode_writes_the_site_factor_the_largest_first(lua: str, tmp_path: Path) -> None:
    placement = table(pool(levels=(0.5,), values=(500_000,), best=1_000_000, worst=1, gap=10), mode="site_factor")
    lines, _ = _submit(lua, tmp_path, placement, [gpu_job("physics"), gpu_job("nlp"), gpu_job("vision")])
    placer = Placer(placement)
    for line, account in zip(lines, ("physics", "nlp", "vision"), strict=True):
        assert line[0] == "-" and line[1] == f"site_factor={placer.place(['gpu'], account, GPU_DEMAND)}"
    assert lines[0][1] == "site_factor=999990"


def test_a_job_the_daemon_would_not_order_is_left_unchanged_without_a_word(lua: str, tmp_path: Path) -> None:
    placement = table(pool(levels=(0.5,), values=(-500,)))
    jobs = [
        gpu_job("vision", nice=NICE_OFFSET + 5),  # the user's own nice
        gpu_job("vision", nice=NICE_OFFSET),  # even --nice=0
        gpu_job("vision", priority=0),  # held
        gpu_job("vision", priority=12345),  # a priority an operator set
        gpu_job("ops"),  # excluded
        gpu_job("vision"),  # placed
    ]
    lines, log = _submit(lua, tmp_path, placement, jobs)
    assert [_nice(line) for line in lines[:5]] == [None] * 5
    assert _nice(lines[5]) is not None
    assert log == []


def test_a_job_it_cannot_place_is_left_unchanged_each_reason_logged_once_a_minute(lua: str, tmp_path: Path) -> None:
    placement = table(
        pool(levels=(0.5,), values=(-500,)), pool(name="small", partitions=("debug",), levels=(), values=())
    )
    jobs = [
        gpu_job("vision", partition="other"),  # in no pool
        gpu_job("vision", partition="gpu,debug"),  # in two pools
        gpu_job("vision", partition="other"),
        gpu_job(None),  # no account at all
        gpu_job(None, default_account="b@d"),  # a name the table cannot hold
        gpu_job("vision", het_job_offset=0),  # a heterogeneous job's component
        gpu_job("vision", het_job_offset=1),
        gpu_job("vision", shared=0),  # --exclusive
        gpu_job("vision", num_tasks=16),  # more tasks than CPUs: --overcommit?
    ]
    lines, log = _submit(lua, tmp_path, placement, jobs)
    assert [_nice(line) for line in lines] == [None] * len(jobs)
    # One line per reason (partition, account, heterogeneous, demand) within the minute.
    assert [level for level, _ in log] == ["info"] * 4
    for (_, message), word in zip(
        log, ("other is in no pool", "'nil' cannot be", "heterogeneous", "--exclusive"), strict=True
    ):
        assert message.startswith("slurm-drf: ") and word in message


def test_the_account_is_the_default_one_when_none_is_given_and_lower_cased(lua: str, tmp_path: Path) -> None:
    placement = table(pool(levels=(0.2, 0.3), values=(-500_000, -400_000)))
    lines, _ = _submit(lua, tmp_path, placement, [gpu_job(None, default_account="Vision"), gpu_job("NLP")])
    placer = Placer(placement)
    assert _nice(lines[0]) == placer.place(["gpu"], "vision", GPU_DEMAND)
    assert _nice(lines[1]) == placer.place(["gpu"], "nlp", GPU_DEMAND)


def test_what_was_placed_counts_until_a_new_table_is_read(lua: str, tmp_path: Path) -> None:
    path = tmp_path / "placement.txt"
    first = table(pool())
    second = table(pool(), written=WRITTEN + 60)
    path.write_text(text(first), encoding="ascii")
    steps: list[LuaValue] = [
        {"op": "place", "id": "a", "job": gpu_job("nlp", gpus=8), "parts": PARTS, "time": NOW},
        {"op": "place", "id": "b", "job": gpu_job("nlp"), "parts": PARTS, "time": NOW},
        {"op": "write", "path": str(path), "text": text(second)},
        {"op": "place", "id": "c", "job": gpu_job("nlp"), "parts": PARTS, "time": NOW + 1},
    ]
    got = answers(run(lua, {"configure": {"table": str(path)}, "steps": steps}, tmp_path))
    placer = Placer(first)
    assert _nice(got["a"]) == placer.place(["gpu"], "nlp", (8, 64_000, 8))
    assert _nice(got["b"]) == placer.place(["gpu"], "nlp", GPU_DEMAND)
    assert _nice(got["c"]) == Placer(second).place(["gpu"], "nlp", GPU_DEMAND) == _nice(got["a"])
