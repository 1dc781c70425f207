"""Hostile input, round 3: every input of the replay and of the trace importers is checked (issue 40).

The replay runs as root on a test cluster and hands trace names to sbatch,
sacctmgr, useradd and runuser. A trace's name, number or time that no tool
may take is refused in one line naming the file, the job and the field,
exit 2, before anything is asked of Slurm or created: these tests run the
replay's checks without a Slurm, with every subprocess forbidden. The
tables `simulate` and `replay --report` print show a name's control
characters escaped; records are split at "\\n" only.
"""

from __future__ import annotations

import math
import re
import subprocess
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_drf.cli.main import main
from slurm_drf.errors import InputError
from slurm_drf.model.escape import terminal_text
from slurm_drf.replay import cluster as replay_cluster
from slurm_drf.replay import run as run_module
from slurm_drf.replay.result import ReplayResult, render_result, to_sim_result
from slurm_drf.replay.trace import (
    MIN_MEM_MIB,
    ReplayInputError,
    build_job_script,
    build_sbatch_argv,
    build_submissions,
    check_name,
    check_trace,
    is_slurm_name,
)
from slurm_drf.replay.users import parse_users
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.importers import parse_swf
from slurm_drf.sim.policies import build_policy
from slurm_drf.sim.render import render_markdown, render_table
from slurm_drf.sim.run_metrics import compute_metrics, render_metrics
from slurm_drf.sim.scenarios import build_scenario
from slurm_drf.sim.workload import MAX_JOB_SECONDS, MAX_SUBMIT_SECONDS, NodeType, Workload, WorkloadError, WorkloadJob

SWF_HEADER = "; MaxNodes: 4\n; MaxProcs: 256\n"
SACCT_HEADER = "JobID|Account|User|Submit|Start|End|Elapsed|Timelimit|State|AllocTRES\n"
# The characters a terminal obeys or that break a line: ESC, BEL, NUL, DEL, a C1 control (CSI),
# NEL (U+0085), the line separator, a bidirectional override.
CONTROLS = ("\x1b", "\x07", "\x00", "\x7f", "\x9b", "\x85", "\u2028", "\u202e")


def swf_line(job: int, submit: str = "0", runtime: str = "600", processors: str = "8", memory: str = "-1") -> str:
    return f"{job} {submit} 0 {runtime} {processors} -1 -1 {processors} -1 {memory} 1 {job} {job} -1 -1 -1 -1 -1\n"


def sacct_row(job: str, account: str = "physics", user: str = "alice") -> str:
    return (
        f"{job}|{account}|{user}|2026-11-30T01:00:00|2026-11-30T01:00:00|2026-11-30T02:00:00|01:00:00|"
        "02:00:00|COMPLETED|cpu=2,mem=4G,node=1\n"
    )


@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Nothing may run: no subprocess, no Slurm read; what was tried is recorded (and fails)."""
    tried: list[object] = []

    def refuse(*args: object, **kwargs: object) -> Any:
        tried.append(args[0] if args else kwargs)
        raise AssertionError(f"a command ran: {args!r}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(replay_cluster, "run_command", refuse)
    monkeypatch.setattr(run_module, "make_source", refuse)
    monkeypatch.delenv("SLURM_DRF_CONFIG", raising=False)
    yield tried
    assert tried == []


def replay_cli(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, list[str]]:
    code = main(["replay", "--workload", str(path), "--arm", "slurm", "--create-accounts", *extra])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


# --------------------------------------------------------------------------
# Class 1: names that would be options, extra fields or NULs reach no tool


HOSTILE_NAMES = [
    "--help",
    "-x",
    "a,b",
    "cluster=prod",
    "a b",
    "x;id",
    "$(id)",
    "a\x00b",
    "a\x1b[31mred",
    "bell\x07",
    "a\tb",
    ".hidden",
    "naïve",
    "a" * 65,
    "",
]


# A job without a user is not refused: --users says who submits it (test_replay).
NAME_CASES = [(field, name) for field in ("account", "user") for name in HOSTILE_NAMES if (field, name) != ("user", "")]


@pytest.mark.parametrize(("field", "name"), NAME_CASES, ids=lambda v: repr(v)[:20])
def test_a_trace_name_no_tool_may_take_is_refused_before_slurm_is_asked(
    name: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[object]
) -> None:
    account, user = (name, "alice") if field == "account" else ("physics", name)
    trace = tmp_path / "trace.txt"
    trace.write_text(SACCT_HEADER + sacct_row("6") + sacct_row("7", account, user), encoding="utf-8")
    code, out, err = replay_cli(trace, capsys)
    assert (code, out) == (2, "")
    assert len(err) == 1, err
    shown = "'(none)'" if name == "" else None  # sacct's empty account is the importer's "(none)"
    assert err[0].startswith(f"slurm-drf: replay: trace.txt: job 7: {field} {shown or ''}")
    assert "is not a name Slurm's tools take as one word" in err[0]
    assert err[0].isprintable(), err[0]


@pytest.mark.parametrize("job_id", ["--help", "7,8", "7\x1b[2J", "a" * 80])
def test_a_trace_job_id_no_tool_may_take_is_refused_naming_it(job_id: str) -> None:
    workload = _workload(_job(job_id, "physics"))
    with pytest.raises(ReplayInputError) as caught:
        check_trace(workload)
    message = str(caught.value)
    assert message.startswith("t: job ") and "the job id is not" in message and message.isprintable()


def test_a_heterogeneous_jobs_component_id_is_a_trace_id() -> None:
    check_trace(_workload(_job("1234+0", "physics"), _job("1234+1", "physics")))


@pytest.mark.parametrize("name", HOSTILE_NAMES[:-1], ids=lambda n: repr(n)[:20])
def test_a_tree_parent_no_tool_may_take_is_refused(name: str) -> None:
    from slurm_drf.sim.workload import AccountTree

    tree = AccountTree(parents=MappingProxyType({"theory": f"physics/{name}"}))
    with pytest.raises(ReplayInputError) as caught:
        check_trace(replace(_workload(_job("1", "theory")), tree=tree))
    assert str(caught.value).startswith("t: tree: parent of account theory ") and str(caught.value).isprintable()


@pytest.mark.parametrize("partition", ["--help", "a,b", "p=q", "x\x00"])
def test_a_partition_no_tool_may_take_is_refused_before_slurm_is_asked(
    partition: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[object]
) -> None:
    trace = tmp_path / "ok.swf"
    trace.write_text(SWF_HEADER + swf_line(1), encoding="utf-8")
    code, out, err = replay_cli(trace, capsys, f"--partition={partition}")
    assert (code, out, len(err)) == (2, "", 1)
    assert err[0].startswith("slurm-drf: replay: --partition ") and err[0].isprintable()


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["--sample-interval", "1e-9"], "--sample-interval"),
        (["--sample-interval", "1e9"], "--sample-interval"),
        (["--stop-after", "99999999999d"], "--stop-after"),
    ],
)
def test_options_out_of_bounds_are_refused_before_slurm_is_asked(
    argv: list[str], what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[object]
) -> None:
    trace = tmp_path / "ok.swf"
    trace.write_text(SWF_HEADER + swf_line(1), encoding="utf-8")
    code, out, err = replay_cli(trace, capsys, *argv)
    assert (code, out, len(err)) == (2, "", 1)
    assert err[0].startswith(f"slurm-drf: replay: {what}")


def test_every_command_the_replay_builds_checks_its_names_again() -> None:
    """Whoever calls them: the argv builders refuse what the trace check would."""
    builds: list[Callable[[], list[str]]] = [
        lambda: replay_cluster.build_account_argv("c", "--help", None, 1),
        lambda: replay_cluster.build_account_argv("c", "a", "x,y", 1),
        lambda: replay_cluster.build_account_argv("c=d", "a", None, 1),
        lambda: replay_cluster.build_user_argv("c", "-u", "a"),
        lambda: replay_cluster.build_user_argv("c", "u", "a=b"),
        lambda: replay_cluster.build_unix_user_argv("--badname"),
        lambda: replay_cluster.build_associations_argv("x\x00"),
    ]
    for build in builds:
        with pytest.raises(ReplayInputError):
            build()
    sub = build_submissions(_workload(_job("7", "physics")), 60)[0]
    for job in (replace(sub.job, account="a,b"), replace(sub.job, user="-rf"), replace(sub.job, job_id="7\x00")):
        with pytest.raises(ReplayInputError):
            build_sbatch_argv(replace(sub, job=job), None, "/", None, "r")
    with pytest.raises(ReplayInputError):
        build_sbatch_argv(sub, "--help", "/", None, "r")
    with pytest.raises(ReplayInputError):
        build_sbatch_argv(sub, None, "/", "-u", "r")
    assert replay_cluster.build_account_argv("c", "theory", "physics", 2) == [
        "sacctmgr", "-i", "add", "account", "theory", "cluster=c", "fairshare=2", "parent=physics",
    ]  # fmt: skip


def test_the_pool_of_users_follows_the_one_rule() -> None:
    with pytest.raises(ReplayInputError, match="'-rf' is not a user name"):
        parse_users("pool=alice,-rf")
    with pytest.raises(ReplayInputError, match="is not a user name"):
        parse_users("pool=a@b")


NAME_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("abcXYZ019._-,=+@ /;$`'\"\\()"),
        st.sampled_from(CONTROLS),
        st.characters(codec="utf-8"),
    ),
    max_size=70,
)


@given(name=NAME_TEXT)
@settings(max_examples=400, deadline=None)
def test_a_name_is_taken_exactly_when_every_tool_reads_it_as_one_plain_word(name: str) -> None:
    plain = (
        0 < len(name) <= 64 and name[0] not in "-." and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
    assert is_slurm_name(name) == plain
    if plain:
        assert check_name(name, "account") == name
        # A positional argument no tool reads as an option, a value with no second field or list in it.
        argv = replay_cluster.build_account_argv(name, name, name, 1)
        assert not argv[4].startswith("-") and all("," not in a and a.count("=") <= 1 for a in argv[4:])
    else:
        with pytest.raises(ReplayInputError) as caught:
            check_name(name, "t: job 7: account")
        message = str(caught.value)
        assert message.startswith("t: job 7: account ") and message.isprintable() and len(message) < 400


# --------------------------------------------------------------------------
# Class 2: numbers and times; one validation with simulate; memory


def test_replay_refuses_what_simulate_refuses_in_the_same_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_slurm: list[object]
) -> None:
    for name, text in (
        ("runtime.swf", SWF_HEADER + swf_line(1, runtime="1e300")),
        ("apart.swf", SWF_HEADER + swf_line(1, submit="-1e15") + swf_line(2)),
        ("duplicate.swf", SWF_HEADER + swf_line(1) + swf_line(1, submit="5")),
    ):
        trace = tmp_path / name
        trace.write_text(text, encoding="utf-8")
        simulated = main(["simulate", "--workload", str(trace), "--format", "json"])
        simulate_err = capsys.readouterr().err
        code, out, err = replay_cli(trace, capsys)
        assert (simulated, code, out) == (2, 2, "")
        assert err == simulate_err.splitlines() and len(err) == 1
        assert err[0].startswith(f"slurm-drf: workload: {name}: job ")


def _swf_workload(text: str) -> Workload:
    trace = parse_swf(SWF_HEADER + text, "t.swf")
    return Workload("t.swf", "test", tuple(trace.jobs), 4, NodeType(64, 512_000, 0))


@pytest.mark.parametrize("compression", [1e-300, 1e-12])
def test_a_compression_that_makes_a_wait_or_a_sleep_unbounded_is_refused(compression: float) -> None:
    workload = _swf_workload(swf_line(1) + swf_line(2, submit="3600"))
    with pytest.raises(ReplayInputError) as caught:
        build_submissions(workload, compression)
    assert str(caught.value).startswith(f"t.swf: job 1: --compress {compression:g} would ")


def test_every_time_handed_to_sbatch_or_sleep_is_a_number_of_a_few_digits() -> None:
    # The longest run time and latest submission the simulator takes, at compression 1.
    workload = _swf_workload(
        swf_line(1, runtime=str(MAX_JOB_SECONDS)) + swf_line(2, submit=str(MAX_SUBMIT_SECONDS), runtime="60")
    )
    check_trace(workload)
    for sub in build_submissions(workload, 1.0):
        argv = build_sbatch_argv(sub, None, "/", None, "r")
        (limit,) = (a.removeprefix("--time=") for a in argv if a.startswith("--time="))
        minutes, seconds = limit.split(":")
        assert len(minutes) <= 6 and 0 <= int(seconds) < 60
        assert re.fullmatch(r"#!/bin/sh\nexec sleep \d{1,8}\.\d{3}\n", build_job_script(sub))
        assert sub.at <= MAX_SUBMIT_SECONDS


@pytest.mark.parametrize("memory", ["-1", "0"])
def test_a_job_without_memory_asks_for_slurms_smallest_amount_never_all_of_the_node(memory: str) -> None:
    [sub] = build_submissions(_swf_workload(swf_line(1, memory=memory)), 60)
    assert sub.job.mem == 0  # the simulator counts no memory for it
    argv = build_sbatch_argv(sub, None, "/", None, "r")
    assert f"--mem={MIN_MEM_MIB}M" in argv and "--mem=0M" not in argv
    assert [a for a in argv if a.startswith("--mem")] == ["--mem=1M"]


SWF_NUMBER = st.one_of(
    st.integers(-(10**25), 10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["-1", "0", "1e300", "-1e15", "1_000", "٣", "nan", "1e", "+-1", "0x10", "1.5", "1e-300"]),
)


@given(
    submit=SWF_NUMBER,
    runtime=SWF_NUMBER,
    processors=SWF_NUMBER,
    memory=SWF_NUMBER,
    user=SWF_NUMBER,
    job=SWF_NUMBER,
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_swf_row_is_refused_in_one_line_or_reaches_sbatch_as_bounded_numbers(
    submit: str, runtime: str, processors: str, memory: str, user: str, job: str
) -> None:
    line = f"{job} {submit} 0 {runtime} {processors} -1 {memory} 4 -1 -1 1 {user} 3 -1 -1 -1 -1 -1\n"
    text = SWF_HEADER + swf_line(1000) + line
    try:
        trace = parse_swf(text, "t.swf")
        workload = Workload("t.swf", "t", tuple(trace.jobs), 4, NodeType(10**19, 10**19, 0))
        check_trace(workload)
        subs = build_submissions(workload, 60)
    except InputError as error:
        message = str(error)
        assert message.startswith(("t.swf:", "t.swf: job ")) and "\n" not in message and message.isprintable()
        return
    for sub in subs:
        argv = build_sbatch_argv(sub, None, "/", "alice", "r")
        numbers = [a.split("=", 1)[1] for a in argv if a.startswith(("--nodes=", "--cpus-per-task=", "--mem="))]
        assert all(len(n.rstrip("M")) <= 20 and n.rstrip("M").isdigit() for n in numbers)
        assert math.isfinite(sub.at) and 0 <= sub.at <= MAX_SUBMIT_SECONDS and 0 < sub.sleep <= MAX_JOB_SECONDS


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (swf_line(7, processors="1e300"), "t.swf:4: field 5 (processors): 1e300 is past 9223372036854775807"),
        (
            swf_line(7, processors="1e10", memory="1e300"),
            "t.swf:4: field 10 (requested memory): 1e300 KB per processor for 10000000000 processors is past",
        ),
        (swf_line(7, runtime="1_000"), "t.swf:4: field 4 (run time): '1_000' is not a number"),
        (swf_line(7, runtime="\u0663"), "t.swf:4: field 4 (run time): '\u0663' is not a number"),
        (swf_line(7, runtime="inf"), "t.swf:4: field 4 (run time): 'inf' is not a finite number"),
        (swf_line(7, runtime="1e999"), "t.swf:4: field 4 (run time): '1e999' is not a finite number"),
        ("7 0 0 60\u2028 8 -1 -1 8 -1 -1 1 1 1 -1 -1 -1 -1 -1\n", "t.swf:4: field 4 (run time): '60\\u2028'"),
    ],
)
def test_an_swf_number_outside_the_format_is_refused_naming_the_line_and_field(row: str, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_swf(SWF_HEADER + swf_line(1) + row, "t.swf")
    assert str(caught.value).startswith(message), str(caught.value)


# --------------------------------------------------------------------------
# Class 3: names shown in tables have their control characters escaped


def _json_trace(accounts: list[str]) -> bytes:
    jobs = [
        {
            "job_id": 10 + index,
            "account": account,
            "user": "alice",
            "partition": "main",
            "state": {"current": ["COMPLETED"]},
            "time": {
                "submission": 1_796_000_000 + index,
                "start": 1_796_000_000 + index,
                "end": 1_796_003_600,
                "elapsed": 3600,
                "limit": {"set": True, "infinite": False, "number": 120},
            },
            "tres": {"allocated": [{"type": "cpu", "count": 2}, {"type": "mem", "count": 4096}], "requested": []},
        }
        for index, account in enumerate(accounts)
    ]
    return orjson.dumps({"jobs": jobs})


def _printed_safely(text: str) -> bool:
    """No character a terminal obeys or that breaks a line but "\n": no control (C0, C1, DEL), format
    (bidirectional overrides, zero-width), separator or surrogate character (`terminal_text`'s rule)."""
    return not any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text.replace("\n", ""))


def test_simulate_shows_control_characters_in_names_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accounts = [f"a{c}z" for c in CONTROLS]
    trace = tmp_path / "trace\x1b[2J.json"
    trace.write_bytes(_json_trace(accounts))
    assert main(["simulate", "--workload", str(trace), "--policies", "fifo,drf"]) == 0
    out = capsys.readouterr().out
    assert _printed_safely(out)
    for shown in ("a\\x1bz", "a\\x07z", "a\\x00z", "a\\x7fz", "a\\x9bz", "a\\x85z", "a\\u2028z", "a\\u202ez"):
        assert shown in out
    assert "trace\\x1b[2J.json" in out
    # JSON keeps the names exact.
    assert main(["simulate", "--workload", str(trace), "--policies", "fifo", "--format", "json", "--no-series"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert sorted(a["account"] for a in data["workload"]["accounts"]) == sorted(accounts)


@given(names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4, unique=True))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_account_name_is_one_printable_cell_of_every_table(names: list[str]) -> None:
    jobs = [_job(str(i), name) for i, name in enumerate(names)]
    workload = _workload(*jobs)
    from slurm_drf.sim.compare import PolicySettings, run_comparison
    from slurm_drf.sim.options import SimOptions

    comparison = run_comparison(workload, ["fifo"], SimOptions(interval=60), PolicySettings(), None)
    table = render_table(comparison)
    assert _printed_safely(table) and _printed_safely(render_markdown(comparison))
    for name in names:
        assert terminal_text(name) in table


def _hostile_result(tmp_path: Path) -> Path:
    workload = build_scenario("gpu-newcomer", 1, nodes=4, jobs=30)
    renamed = {a: f"{a}\x1b]0;owned\x07\u2028" for a in workload.accounts}
    workload = replace(
        workload,
        jobs=tuple(replace(j, account=renamed[j.account]) for j in workload.jobs),
        weights=MappingProxyType({renamed[a]: Fraction(w) for a, w in workload.weights.items()}),
        name="gpu\x1b[2Jnewcomer",
    )
    sim = simulate(workload, build_policy("drf", engine="fast"))
    result = ReplayResult(
        arm="drf",
        summary="x",
        compression=60.0,
        sample_interval=sim.interval / 60.0,
        workload=sim.workload,
        job_ids=tuple(str(i + 1) for i in range(len(sim.workload.jobs))),
        start=tuple(float(x) for x in sim.start),
        end=tuple(float(x) for x in sim.end),
        capacity=sim.capacity,
        sample_time=tuple(float(x) for x in sim.sample_time),
        sample_used=tuple(tuple((0, 0, 0) for _ in sim.workload.accounts) for _ in sim.sample_time),
        sample_pending=tuple(tuple(int(p) for p in row) for row in sim.sample_pending),
        writes_per_cycle=(1,),
        rpcs=MappingProxyType({"REQUEST_JOB_INFO": 3}),
        slurm_settings=(),
        slurm_version=None,
        daemon_config={"mode": "nice"},
        backend="slurm cli",
        notes=("a note with \x1b[31mred\x00 and \u2028 in it",),
    )
    path = tmp_path / "drf.json"
    path.write_bytes(orjson.dumps(render_result(result, render_metrics(compute_metrics(to_sim_result(result))), None)))
    return path


def test_replay_report_shows_control_characters_in_names_and_notes_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "--report", str(_hostile_result(tmp_path)), "--no-predict"]) == 0
    out = capsys.readouterr().out
    assert _printed_safely(out)
    assert "\\x1b]0;owned\\x07\\u2028" in out and "note (drf): a note with \\x1b[31mred\\x00 and \\u2028 in it" in out


def test_an_account_named_like_mathtext_does_not_stop_a_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from slurm_drf.sim.compare import PolicySettings, run_comparison
    from slurm_drf.sim.options import SimOptions
    from slurm_drf.sim.render import render_html, render_plot_png

    workload = _workload(_job("1", "$\\x$"), _job("2", "a\x1bb"))
    comparison = run_comparison(workload, ["fifo"], SimOptions(interval=60), PolicySettings(), None)
    png = render_plot_png(comparison)
    assert png.startswith(b"\x89PNG")
    page = render_html(comparison, png)
    assert "\x1b" not in page and "a\\x1bb" in page


# --------------------------------------------------------------------------
# Class 4: records end at "\n" only


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"])
def test_answers_of_slurm_are_split_at_newlines_only(separator: str) -> None:
    assert replay_cluster.parse_associations(f"phys{separator}ics|alice\nlab|\r\n") == {
        (f"phys{separator}ics", "alice"),
        ("lab", ""),
    }
    text = f"Remote Procedure Call statistics by message type\n\tREQUEST_PING{separator} ( 1008) count:5\n"
    assert replay_cluster.records(text)[1] == f"\tREQUEST_PING{separator} ( 1008) count:5"


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_an_swf_line_is_one_record_whatever_it_holds(separator: str) -> None:
    # A comment may hold anything; a data line holding another character names its field.
    trace = parse_swf(f"; Note: a{separator}b\n" + SWF_HEADER + swf_line(1), "t.swf")
    assert [j.job_id for j in trace.jobs] == ["1"]
    with pytest.raises(WorkloadError, match=r"^t\.swf:4: field 2 \(submit time\)"):
        parse_swf(SWF_HEADER + swf_line(1) + f"2 0{separator}1 0 60 8 -1 -1 8 -1 -1 1 2 2 -1 -1 -1 -1 -1\n", "t.swf")


def test_swf_lines_may_end_in_crlf() -> None:
    text = (SWF_HEADER + swf_line(1) + swf_line(2, submit="60")).replace("\n", "\r\n")
    assert [j.job_id for j in parse_swf(text, "t.swf").jobs] == ["1", "2"]


@pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\x0c", "\x1c"])
def test_a_sacct_trace_field_holding_a_line_separator_is_one_record(separator: str) -> None:
    from slurm_drf.sim.importers import parse_sacct_pipe

    trace = parse_sacct_pipe(SACCT_HEADER + sacct_row("7", f"phys{separator}ics"), "t.txt")
    assert [j.account for j in trace.jobs] == [f"phys{separator}ics"]


# --------------------------------------------------------------------------
# Helpers


def _job(job_id: str, account: str, submit: float = 0.0, duration: float = 600.0) -> WorkloadJob:
    return WorkloadJob(job_id, account, "alice", submit, duration, duration, 1, 1000, 0)


def _workload(*jobs: WorkloadJob) -> Workload:
    return Workload("t", "test", tuple(jobs), 2, NodeType())
