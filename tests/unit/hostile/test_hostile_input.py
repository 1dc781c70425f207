"""Hostile and inconsistent input: every item gives one parser behaviour and,
where input is bad, exit 2 with one line naming the file, line, job or key.

Each case is the exact input of the issue "Hostile and inconsistent input"
(groups 1 and 2), plus a few neighbours of it.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_drf.cli.main import main
from slurm_drf.config.settings import Config
from slurm_drf.cycle.store import StateStore, parse_state
from slurm_drf.errors import SlurmWriteError, SnapshotError
from slurm_drf.model.codec import check_job_table, is_job_id, parse_job, parse_snapshot
from slurm_drf.model.types import JobTable
from slurm_drf.policy.ownership import JobMemory
from slurm_drf.policy.plan import compute_plan
from slurm_drf.policy.state import EMPTY_STATE
from slurm_drf.slurm.write import Write, check_write
from tests.paths import FIXTURES
from tests.unit.cli.test_model_cli import good_snapshot

Mutation = Callable[[dict[str, Any]], object]


def _job(index: int, **fields: object) -> Mutation:
    return lambda data: data["jobs"][index].update(fields)


def _tres(index: int, **fields: object) -> Mutation:
    return lambda data: data["jobs"][index]["tres"].update(fields)


def _append_copy(key: str, index: int) -> Mutation:
    return lambda data: data[key].append(copy.deepcopy(data[key][index]))


def _pending_twice(data: dict[str, Any]) -> None:
    data["jobs"].append(copy.deepcopy(data["jobs"][1]))


def _running_and_pending(data: dict[str, Any]) -> None:
    again = copy.deepcopy(data["jobs"][2])
    again["job_id"] = "1234"  # the running job's id
    data["jobs"].append(again)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


# (input, the one-line message). Group 1: wrong plans from inconsistent snapshots.
INCONSISTENT: list[tuple[str, Mutation, str]] = [
    (
        "node listed twice",
        _append_copy("nodes", 0),
        "node gpu01: listed twice (nodes[0] and nodes[1]); list a node once, with all its partitions",
    ),
    (
        "job pending twice",
        _pending_twice,
        "job 1240: listed twice (jobs[1] and jobs[3]); a snapshot has one record per job",
    ),
    (
        "job running and pending",
        _running_and_pending,
        "job 1234: listed twice (jobs[0] and jobs[3]); a snapshot has one record per job",
    ),
    (
        "array_tasks 2**61+1",
        lambda d: (_job(1, array_tasks=2**61 + 1)(d), _tres(1, cpu=4)(d)),
        "job 1240.array_tasks: expected an integer <= 4000001 (the largest MaxArraySize), got 2305843009213693953",
    ),
    (
        "array_tasks 4000002",
        _job(1, array_tasks=4_000_002),
        "job 1240.array_tasks: expected an integer <= 4000001 (the largest MaxArraySize), got 4000002",
    ),
    ("true as a TRES value", _tres(1, cpu=True), "job 1240.tres.cpu: expected a number, got True"),
    ("true as a priority", _job(1, priority=True), "job 1240.priority: expected an integer, got True"),
    ("false as a nice", _job(1, nice=False), "job 1240.nice: expected an integer, got False"),
    ("true as array_tasks", _job(1, array_tasks=True), "job 1240.array_tasks: expected an integer, got True"),
    ("true as a site factor", _job(1, site_factor=True), "job 1240.site_factor: expected an integer, got True"),
    ("empty account", _job(1, account=""), "job 1240.account: expected a name, got ''"),
    ("empty partition", _job(1, partition=""), "job 1240.partition: expected a name, got ''"),
    *(
        (
            f"job id {bad!r}",
            _job(1, job_id=bad),
            f"jobs[1].job_id: expected a job number from 1 to 4294967293, got {bad!r}",
        )
        for bad in ("", "abc", "1;2", "1 2", "1,2", "1e5", "-1", "123_[0-9]", "123\n", "0", "0123", "+5", "٣", -1, 0)
    ),
    (
        "job id past 32 bits",
        _job(1, job_id="4294967296"),
        "jobs[1].job_id: expected a job number from 1 to 4294967293, got '4294967296'",
    ),
    (
        "het leader id 1;2",
        lambda d: d.update(het_leaders=["1;2"]),
        "het_leaders[0]: expected a job number from 1 to 4294967293, got '1;2'",
    ),
]

# Group 2 (snapshot part): numbers no Slurm can hold and nesting no parser should follow.
OUT_OF_RANGE: list[tuple[str, Mutation, str]] = [
    *(
        (
            f"TRES {shown}",
            _tres(1, cpu=value),
            f"job 1240.tres.cpu: expected a number <= 9223372036854775807, got {shown}",
        )
        for value, shown in ((1e300, "1e+300"), (2**70, "1180591620717411303424"), (2**64, "18446744073709551616"))
    ),
    *(
        (
            f"priority {shown}",
            _job(1, priority=value),
            f"job 1240.priority: expected an integer <= 4294967295, got {shown}",
        )
        for value, shown in ((1e300, "1e+300"), (2**70, "1180591620717411303424"), (2**64, "18446744073709551616"))
    ),
    *(
        (f"nice {shown}", _job(1, nice=value), f"job 1240.nice: expected an integer <= 2147483645, got {shown}")
        for value, shown in ((1e300, "1e+300"), (2**70, "1180591620717411303424"), (2**64, "18446744073709551616"))
    ),
    (
        "nice -2**64",
        _job(1, nice=-(2**64)),
        "job 1240.nice: expected an integer >= -2147483645, got -18446744073709551616",
    ),
    (
        "site factor 2**64",
        _job(1, site_factor=2**64),
        "job 1240.site_factor: expected an integer <= 2147483645, got 18446744073709551616",
    ),
    (
        "node TRES 2**64",
        lambda d: d["nodes"][0]["tres"].update(cpu=2**64),
        "node gpu01.tres.cpu: expected a number <= 9223372036854775807, got 18446744073709551616",
    ),
    (
        "PriorityWeight sum past 2**63",
        lambda d: d.update(priority_weights={"PriorityWeightAge": 2**62, "PriorityWeightFairshare": 2**62}),
        "priority_weights.PriorityWeightAge: expected a number <= 4294967295, got 4611686018427387904",
    ),
    (
        "jobs' total past 2**63",
        lambda d: (_tres(1, cpu=2**62)(d), _job(1, array_tasks=4)(d)),
        "job 1240.tres.cpu: the jobs' total cpu (array tasks counted) passes 9223372036854775807 here",
    ),
    (
        "nodes' total past 2**63",
        lambda d: (
            _append_copy("nodes", 0)(d),
            d["nodes"][1].update(name="gpu02"),
            d["nodes"][0]["tres"].update(cpu=2**62),
            d["nodes"][1]["tres"].update(cpu=2**62),
        ),
        "node gpu02.tres.cpu: the nodes' total cpu passes 9223372036854775807 here",
    ),
    (
        "a dict 1,000 deep in tres",
        _tres(2, cpu=_nested(1000)),
        "job 1241.tres.cpu: expected a number, got {'a': {'a': {...}}}",
    ),
    ("nan as a priority", _job(1, priority=float("nan")), "job 1240.priority: expected an integer, got nan"),
]

TREE: list[dict[str, object]] = [
    {"account": "root", "parent": None, "user": None, "shares": 1},
    {"account": "physics", "parent": "root", "user": None, "shares": 2},
    {"account": "theory", "parent": "physics", "user": None, "shares": 1},
    {"account": "theory", "parent": "theory", "user": "alice", "shares": None},
]


def _tree(*changes: tuple[int, dict[str, object]], more: tuple[dict[str, object], ...] = ()) -> Mutation:
    """The good tree with entries changed (index, fields) and more appended."""

    def mutate(data: dict[str, Any]) -> None:
        tree = copy.deepcopy(TREE) + [dict(entry) for entry in more]
        for index, fields in changes:
            tree[index].update(fields)
        data["associations"] = tree

    return mutate


# The association tree (docs/formats.md): the association and the key are named.
ASSOCIATION_CASES: list[tuple[str, Mutation, str]] = [
    (
        "associations not a list",
        lambda d: d.update(associations={"root": None}),
        "associations: expected a list, got {'root': None}",
    ),
    (
        "association not an object",
        lambda d: d.update(associations=[*TREE, "theory"]),
        "associations[4]: expected an object, got 'theory'",
    ),
    (
        "unknown parent",
        _tree((2, {"parent": "chemistry"})),
        "associations[2] (account theory): parent: no account association for 'chemistry'",
    ),
    (
        "cycle",
        _tree((1, {"parent": "theory"})),
        "associations[1] (account physics): parent: a cycle (physics -> theory -> physics) never reaches the root",
    ),
    (
        "account listed twice",
        _tree(more=({"account": "physics", "parent": "root"},)),
        "associations[4] (account physics): listed twice (associations[1] and [4])",
    ),
    (
        "user listed twice",
        _tree(more=({"account": "theory", "user": "alice", "shares": 3},)),
        "associations[4] (account theory, user alice): listed twice (associations[3] and [4])",
    ),
    (
        "two roots",
        _tree((1, {"parent": None})),
        "associations[1] (account physics): parent: a second root (account root has no parent either); "
        "every account but the root needs one",
    ),
    (
        "shares a string",
        _tree((1, {"shares": "parent"})),
        "associations[1] (account physics).shares: expected an integer, got 'parent'",
    ),
    (
        "shares true",
        _tree((1, {"shares": True})),
        "associations[1] (account physics).shares: expected an integer, got True",
    ),
    (
        "shares negative",
        _tree((1, {"shares": -1})),
        "associations[1] (account physics).shares: expected an integer >= 0, got -1",
    ),
    (
        "shares past 32 bits",
        _tree((1, {"shares": 2**32})),
        "associations[1] (account physics).shares: expected an integer <= 4294967295 (RawShares are 32-bit), "
        "got 4294967296",
    ),
    (
        "account missing",
        _tree(more=({"parent": "root"},)),
        "associations[4]: missing key 'account'",
    ),
    (
        "account empty",
        _tree((2, {"account": ""})),
        "associations[2].account: expected a name, got ''",
    ),
    (
        "user a number",
        _tree((3, {"user": 7})),
        "associations[3].user: expected a name or null, got 7",
    ),
    (
        "user under an account not in the tree",
        _tree((3, {"account": "lab", "parent": None})),
        "associations[3] (account lab, user alice): account: no account association for 'lab'",
    ),
    (
        "user under another parent",
        _tree((3, {"parent": "physics"})),
        "associations[3] (account theory, user alice): parent: a user association hangs under its own "
        "account 'theory', got 'physics'",
    ),
]

CASES = INCONSISTENT + OUT_OF_RANGE + ASSOCIATION_CASES


@pytest.mark.parametrize(("name", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_hostile_snapshot_is_refused_naming_the_job_or_node_and_key(name: str, mutate: Mutation, message: str) -> None:
    data = good_snapshot()
    mutate(data)
    with pytest.raises(SnapshotError) as caught:
        parse_snapshot(data)
    assert str(caught.value) == message


@pytest.mark.parametrize(("name", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_the_careful_parser_path_gives_the_same_answer(name: str, mutate: Mutation, message: str) -> None:
    """Every record through `parse_job` alone (the careful path): the same refusal,
    or, for what only a whole snapshot can show, acceptance record by record."""
    data = good_snapshot()
    mutate(data)
    try:
        jobs = [parse_job(record, i) for i, record in enumerate(data["jobs"])]
    except SnapshotError as error:
        assert str(error) == message
    else:
        # What only the whole snapshot shows: top-level keys, nodes, repeats, totals.
        assert message.startswith(("node ", "priority_weights", "het_leaders", "associations")) or (
            "listed twice" in message or "total" in message
        )
        assert len(JobTable.from_jobs(jobs)) == len(data["jobs"])


def test_the_good_tree_is_taken_and_a_snapshot_without_one_is_flat() -> None:
    data = good_snapshot()
    assert parse_snapshot(data).associations == ()
    _tree()(data)
    assert [a.account for a in parse_snapshot(data).associations] == ["root", "physics", "theory", "theory"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "snap.json"
    path.write_text(text)
    return path


# Through a file: all but what JSON cannot carry (NaN) or json.dumps cannot
# write (1,000 levels deep; test_a_dict_1000_deep_in_tres_exits_2 writes that one).
FILE_CASES = [case for case in CASES if not case[0].startswith(("nan", "a dict 1,000 deep"))]


@pytest.mark.parametrize(("name", "mutate", "message"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_plan_exits_2_with_one_line(
    name: str, mutate: Mutation, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = good_snapshot()
    mutate(data)
    path = _write(tmp_path, json.dumps(data))
    code = main(["plan", "--snapshot", str(path), "--config", "/dev/null"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    # orjson reads integers past 2**64 as floats, so only the shown value may differ.
    assert err.startswith(f"slurm-drf: snapshot: {path}: {message.split(', got ')[0]}")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"format": "slurm-drf-snapshot/1", "nodes": [], "jobs": [' + "[" * 100_000 + "]" * 100_000 + "]}",
        '{"jobs": [{"tres": {"cpu": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}}]}",
    ],
    ids=["100k nested brackets", "100k nested brackets in jobs", "a dict 100k deep in tres"],
)
def test_deep_nesting_exits_2_naming_the_place(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, text)
    code = main(["plan", "--snapshot", str(path), "--config", "/dev/null"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith(f"slurm-drf: snapshot: {path}:1:") and "invalid JSON" in err
    assert len(err.splitlines()) == 1


def test_a_dict_1000_deep_in_tres_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = '{"a": ' * 1000 + "1" + "}" * 1000
    text = json.dumps(good_snapshot()).replace('"tres": {"cpu": 2,', '"tres": {"cpu": ' + deep + ",", 1)
    path = _write(tmp_path, text)
    code = main(["plan", "--snapshot", str(path), "--config", "/dev/null"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == f"slurm-drf: snapshot: {path}: job 1241.tres.cpu: expected a number, got {{'a': {{'a': {{...}}}}}}\n"


def test_a_job_id_that_is_a_number_is_still_taken() -> None:
    data = good_snapshot()
    data["jobs"][1]["job_id"] = 1240
    assert parse_snapshot(data).jobs[1].job_id == "1240"
    assert is_job_id("4294967293") and not is_job_id("4294967294")


@pytest.mark.parametrize("job_id", ["123\n", "", "abc", "1;2", "1 2", "1,2", "1e5", "-1", "123_[0-9]", "\n123"])
def test_the_writer_refuses_a_job_id_that_is_not_a_plain_number(job_id: str) -> None:
    with pytest.raises(SlurmWriteError) as caught:
        check_write(Write(job_id, "nice", -5))
    assert str(caught.value) == f"job {job_id!r}: refusing to write to a job id that is not a plain number"


# --------------------------------------------------------------------------
# One parser behaviour, whichever path runs: random records through the fast
# path (`parse_snapshot`) and record by record through `parse_job`.

_ANY_VALUE = st.one_of(
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0, 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, 4_000_001, 4_000_002]),
    st.sampled_from([1.0, 1.5, float("nan"), float("inf"), 1e300]),
    st.sampled_from(["", "1", "a", "1;2"]),
    st.none(),
)
_RECORD_KEYS = ("job_id", "account", "partition", "state", "user", "priority", "nice", "array_tasks", "site_factor")


@st.composite
def _records(draw: st.DrawFn) -> list[dict[str, Any]]:
    records = []
    for index in range(draw(st.integers(min_value=1, max_value=4))):
        record: dict[str, Any] = {
            "job_id": str(100 + index),
            "account": "a",
            "partition": "p",
            "state": "PENDING",
            "tres": {"cpu": 1},
        }
        for key in draw(st.lists(st.sampled_from(_RECORD_KEYS), max_size=2)):
            record[key] = draw(_ANY_VALUE)
        if draw(st.booleans()):
            record["tres"] = {"cpu": draw(_ANY_VALUE)}
        records.append({k: v for k, v in record.items() if v is not None or k == "site_factor"})
    return records


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records())
def test_fast_and_careful_paths_agree_on_random_records(records: list[dict[str, Any]]) -> None:
    data = {"format": "slurm-drf-snapshot/1", "nodes": [], "jobs": records}
    try:
        fast = list(parse_snapshot(data).jobs)
    except SnapshotError as error:
        fast_error: str | None = str(error)
    else:
        fast_error = None
    try:
        careful = [parse_job(record, i) for i, record in enumerate(records)]
        check_job_table(JobTable.from_jobs(careful))
    except SnapshotError as error:
        assert fast_error == str(error)
    else:
        assert fast_error is None, fast_error
        # The columns keep no zero amounts; a record may write them.
        assert fast == [replace(job, tres={k: v for k, v in job.tres.items() if v}) for job in careful]


# --------------------------------------------------------------------------
# Group 2, the config: check-config said OK and every plan then failed (exit 1).

CONFIG_CASES: list[tuple[str, str, str]] = [
    (
        "weight 1e-320",
        "accounts:\n  A: {weight: 1e-320}\n",
        "2: accounts.A.weight: 1e-320 is not between 0.000001 and 1000000",
    ),
    (
        "default_weight 5e-324",
        "default_weight: 5e-324\n",
        "1: default_weight: 5e-324 is not between 0.000001 and 1000000",
    ),
    (
        "weight 1e7",
        "accounts:\n  A: {weight: 1e7}\n",
        "2: accounts.A.weight: 1e7 is not between 0.000001 and 1000000",
    ),
    (
        "weight of 27 decimals",
        "accounts:\n  A: {weight: 0.000001000000000000000000001}\n",
        "2: accounts.A.weight: 0.000001000000000000000000001 has more than 20 digits after the point",
    ),
    (
        "a 5,000-digit scale",
        "mode: nice\nscale: " + "9" * 5000 + "\n",
        "2: scale: an integer of 5000 characters; no setting takes one",
    ),
    (
        "100k nested brackets",
        "accounts: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "1: YAML syntax error: more than 64 nested lists or mappings (column 74)",
    ),
    (
        "100k nested mappings",
        "accounts: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
        "1: YAML syntax error: more than 64 nested lists or mappings (column 260)",
    ),
]


@pytest.mark.parametrize(("name", "text", "message"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
@pytest.mark.parametrize("verb", ["check-config", "plan"])
def test_hostile_config_exits_2_naming_the_key(
    name: str, text: str, message: str, verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    snapshot = _write(tmp_path, json.dumps(good_snapshot()))
    args = (
        ["check-config", str(config)]
        if verb == "check-config"
        else ["plan", "--snapshot", str(snapshot), "--config", str(config)]
    )
    code = main(args)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"slurm-drf: config: {config}:{message}\n"


@pytest.mark.parametrize("weight", ["0.000001", "1000000", "0.30000000000000004", "2", "0.5"])
def test_weights_in_range_still_plan(weight: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"accounts:\n  physics: {{weight: {weight}}}\ndefault_weight: {weight}\n")
    code = main(["plan", "--snapshot", str(_write(tmp_path, json.dumps(good_snapshot()))), "--config", str(config)])
    capsys.readouterr()
    assert code == 0


# --------------------------------------------------------------------------
# Group 2, the state file: user_nice 2**70 made every cycle fail.


def _state_file(tmp_path: Path, jobs: dict[str, object], **top: object) -> StateStore:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o750)
    data = {
        "format": "slurm-drf-state/1",
        "epoch": 3,
        "fingerprint": "f",
        "tie_wins": {},
        "plan_wins": {},
        "jobs": jobs,
    }
    data.update(top)
    (directory / "state.json").write_text(json.dumps(data), encoding="utf-8")
    (directory / "state.json").chmod(0o640)
    return StateStore(directory)


@pytest.mark.parametrize(
    ("entry", "message", "kept"),
    [
        (
            [2**70, -5, "nice"],
            "jobs.1240 user_nice: expected an integer from -2147483645 to 2147483645, got 1180591620717411303424",
            None,
        ),
        ([True, -5, "nice"], "jobs.1240 user_nice: expected an integer from -2147483645 to 2147483645, got True", None),
        (
            [3, 2**64, "nice"],
            "jobs.1240 written: expected an integer from -2147483645 to 4294967295, got 18446744073709551616",
            JobMemory(3, 3, "nice"),
        ),
        ([3, -5, "x"], "jobs.1240 mode: expected one of nice, site_factor, priority, got 'x'", JobMemory(3, 3, "nice")),
    ],
)
def test_a_state_out_of_range_is_named_and_keeps_the_users_nice(
    entry: list[object], message: str, kept: JobMemory | None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _state_file(tmp_path, {"1240": entry, "1241": [7, -9, "nice"]})
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        parse_state(json.loads(store.path.read_text()))
    with caplog.at_level(logging.WARNING):
        state = store.load()
    count = 1 if kept is None else 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{store.path}: state is corrupt ({message}); starting fresh but for {count} job(s)' own nice: "
        "tie wins are forgotten and jobs are rewritten where needed"
    ]
    assert state.jobs["1241"] == JobMemory(7, -9, "nice")  # the others' own nice is kept
    assert state.jobs.get("1240") == kept
    plan = compute_plan(parse_snapshot(good_snapshot()), Config(), state)  # every cycle plans again
    assert [j.job_id for j in plan.jobs] == ["1241", "1240"]


def test_a_state_whose_tie_wins_are_corrupt_still_keeps_every_users_nice(tmp_path: Path) -> None:
    store = _state_file(tmp_path, {"1240": [1, -5, "nice"], "1241": [7, -9, "site_factor"]}, tie_wins={"a": "many"})
    state = store.load()
    assert dict(state.jobs) == {"1240": JobMemory(1, -5, "nice"), "1241": JobMemory(7, -9, "site_factor")}
    assert state.epoch == 0 and not state.tie_wins


def test_a_state_of_100k_nested_brackets_starts_fresh(tmp_path: Path) -> None:
    store = _state_file(tmp_path, {})
    store.path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert store.load() == EMPTY_STATE


# --------------------------------------------------------------------------
# Group 2, the simulator's input.

SWF_FIXTURE = FIXTURES / "sim" / "sample.swf"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_an_swf_group_that_is_not_a_number_exits_2(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = SWF_FIXTURE.read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(";"))
    fields = lines[number].split()
    fields[12] = bad
    lines[number] = " ".join(fields)
    trace = tmp_path / "trace.swf"
    trace.write_text("\n".join(lines) + "\n")
    code = main(["simulate", "--workload", str(trace)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"slurm-drf: workload: trace.swf:{number + 1}: field 13 (group): {bad!r} is not a finite number\n"


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_numpy_cannot_take_exits_2(seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--seed", seed])
    _, err = capsys.readouterr()
    assert caught.value.code == 2
    assert err.splitlines()[-1] == (
        f"slurm-drf simulate: error: argument --seed: expected a number from 0 to 18446744073709551615, got {seed}"
    )
