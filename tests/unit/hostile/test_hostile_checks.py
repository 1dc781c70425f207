"""Hostile and inconsistent input, the last groups: the checks agree with the daemon, and small truths.

Each case is the exact input of the issue "Hostile and inconsistent input"
(the groups "The checks must agree with the daemon" and "Small truths a
newcomer tripped on"), plus a few neighbours of it. The pre-flight the
README recommends (`check-config`, `once --dry-run`) must refuse what
`once` and `daemon` refuse, with one line naming the file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from yaml.nodes import Node

from slurm_drf.cli.main import main
from slurm_drf.config.load import load_config
from slurm_drf.config.settings import Config
from slurm_drf.cycle.store import StateStore
from slurm_drf.errors import ConfigError, SlurmReadError, StateError
from slurm_drf.files import read_private
from slurm_drf.model.codec import parse_snapshot
from slurm_drf.model.snapshot_file import SnapshotFileSource, write_snapshot_file
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.sim.options import SimOptions
from slurm_drf.slurm.cli_source import CliSource, build_sinfo_argv, build_squeue_argv
from slurm_drf.slurm.parse.snapshot import SnapshotHeader, build_snapshot
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_json, render_explanation_text
from slurm_drf.trail.plan_output import render_plan_json, render_plan_table
from slurm_drf.trail.share_report import build_report, render_report, render_report_json
from slurm_drf.trail.text import format_tres
from tests.paths import REPO
from tests.unit.cli.test_model_cli import good_snapshot
from tests.unit.slurm.test_slurm_parse import Replay
from tests.unit.slurm.test_slurm_parse import load as load_fixture
from tests.unit.slurm.test_slurm_parse import text as parse_text

GOOD = "accounts:\n  physics: {weight: 2}\n"


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """The most permissive umask there is: whatever is created private is so by its own mode."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _config(directory: Path, mode: int = 0o644, text: str = GOOD) -> Path:
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = directory / "config.yaml"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


# --------------------------------------------------------------------------
# A1: check-config and `once --dry-run` refuse what `once` and `daemon` refuse.

# The verbs of the pre-flight, and the real ones for comparison; each must exit 2 before reading Slurm.
PREFLIGHT = [
    ["check-config", "{config}"],
    ["once", "--dry-run", "--config", "{config}"],
    ["reset", "--dry-run", "--config", "{config}"],
    ["once", "--config", "{config}"],
]


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646, 0o660])
@pytest.mark.parametrize("verb", PREFLIGHT, ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else str(v))
def test_a_config_others_can_write_is_refused_by_every_verb_that_checks(
    verb: list[str], mode: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "etc", mode)
    code = main([part.format(config=config) for part in verb])
    line = _one_error_line(capsys)
    assert code == 2
    assert line == (
        f"slurm-drf: config: {config}: the config file is writable by group or others "
        f"(mode {stat.filemode(stat.S_IFREG | mode)}); run: chmod go-w {config}"
    )


def test_check_config_still_accepts_a_private_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path / "etc", 0o644)
    assert main(["check-config", str(config)]) == 0
    assert capsys.readouterr().out.startswith(f"{config}: OK (mode nice, 1 weighted account(s)")


# --------------------------------------------------------------------------
# A2: the directories above the file, as OpenSSH's safe_path, and the file as opened.


@pytest.mark.parametrize("directory_mode", [0o777, 0o775, 0o757, 0o770])
def test_a_private_config_in_a_directory_others_can_write_is_refused(
    directory_mode: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The input: a 0644 config in a world-writable, non-sticky directory.
    directory = tmp_path / "open"
    config = _config(directory, 0o644)
    directory.chmod(directory_mode)
    assert main(["check-config", str(config)]) == 2
    assert _one_error_line(capsys) == (
        f"slurm-drf: config: {config}: the config file is in directory {directory}, which is writable by "
        f"group or others (mode {stat.filemode(stat.S_IFDIR | directory_mode)}) and not sticky; "
        f"run: chmod go-w {directory}"
    )


def test_a_directory_further_up_counts_too(tmp_path: Path) -> None:
    top = tmp_path / "top"
    config = _config(top / "etc", 0o644)
    top.chmod(0o777)
    with pytest.raises(ConfigError, match=rf"^{config}: the config file is in directory {top}, which is writable"):
        load_config(config, private=True)


def test_a_symlink_is_judged_by_the_directories_of_its_target(tmp_path: Path) -> None:
    target_directory = tmp_path / "open"
    real = _config(target_directory, 0o644)
    target_directory.chmod(0o777)
    link = _config(tmp_path / "safe").with_name("link.yaml")
    link.symlink_to(real)
    with pytest.raises(ConfigError, match=rf"^{link}: the config file is in directory {target_directory}, "):
        load_config(link, private=True)


def test_a_sticky_world_writable_directory_like_tmp_is_accepted(tmp_path: Path) -> None:
    # The one difference from OpenSSH, decided in files.check_ancestors: in a
    # sticky directory no one but an entry's owner may rename or remove it.
    directory = tmp_path / "sticky"
    config = _config(directory, 0o644)
    directory.chmod(0o1777)
    assert load_config(config, private=True).weights["physics"] == 2


def test_a_directory_owned_by_someone_else_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "theirs"
    config = _config(directory, 0o644)
    if os.geteuid() == 0:
        os.chown(directory, 12345, 12345)
    else:
        real_stat = os.stat

        def stat_as_if_theirs(path: object, *args: object, **kwargs: object) -> os.stat_result:
            info = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
            if os.fspath(path) == str(directory):  # type: ignore[call-overload]
                fields = list(info)
                fields[stat.ST_UID] = 12345
                return os.stat_result(fields)
            return info

        monkeypatch.setattr(os, "stat", stat_as_if_theirs)
    with pytest.raises(ConfigError) as caught:
        load_config(config, private=True)
    assert str(caught.value) == (
        f"{config}: the config file is in directory {directory}, owned by uid 12345, neither root nor this "
        f"user (uid {os.geteuid()}); run: chown root {directory}"
    )


def test_the_file_checked_is_the_file_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A path check (stat, then open) passes whatever stat says; fstat of the
    # descriptor read from cannot be fooled by a path swapped in between.
    config = _config(tmp_path / "etc", 0o666)
    real_stat = os.stat
    harmless = real_stat(tmp_path / "etc")  # a 0755 directory: nothing to refuse

    def stat_hiding_the_file(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if os.fspath(path) == str(config):  # type: ignore[call-overload]
            return harmless
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat_hiding_the_file)
    with pytest.raises(ConfigError, match=rf"^{config}: the config file is writable by group or others"):
        load_config(config, private=True)


@pytest.mark.parametrize("kind", ["fifo", "directory", "/dev/zero"])
def test_a_config_that_is_no_regular_file_is_refused_without_hanging(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path, 0o600)  # a reader of a FIFO waits for a writer: open must not
        shown = "prw-------"
    elif kind == "directory":
        path.mkdir(mode=0o700)
        shown = "drwx------"
    else:
        path = Path(kind)
        shown = stat.filemode(os.stat(kind).st_mode)
    assert main(["check-config", str(path)]) == 2
    assert _one_error_line(capsys) == f"slurm-drf: config: {path}: the config file is not a regular file ({shown})"


def test_a_state_directory_inside_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "var"
    parent.mkdir(mode=0o755)
    store = StateStore(parent / "state")
    store.ensure_directory()  # fine while the parent is private
    parent.chmod(0o777)
    with pytest.raises(StateError, match=rf"^{parent / 'state'}: the state directory is in directory {parent}, "):
        store.ensure_directory()
    with pytest.raises(StateError, match=rf"^{store.path}: the state file is in directory {parent}, "):
        (store.directory / "state.json").write_text("{}")
        (store.directory / "state.json").chmod(0o640)
        store.load()


def test_a_state_file_others_can_write_is_refused_as_opened(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.ensure_directory()
    store.path.write_text("{}")
    store.path.chmod(0o646)
    with pytest.raises(StateError, match=rf"^{store.path}: the state file is writable by group or others"):
        store.load()


def test_read_private_reads_what_it_checked(tmp_path: Path) -> None:
    path = _config(tmp_path / "etc", 0o600, "interval: 30s\n")
    assert read_private(path, "the config file", ConfigError) == b"interval: 30s\n"
    with pytest.raises(ConfigError, match=r"is larger than 5 bytes"):
        read_private(path, "the config file", ConfigError, limit=5)


# --------------------------------------------------------------------------
# A3: a snapshot lists every user; the lock file is the daemon's. 0640 or stricter whatever the umask.


@pytest.mark.usefixtures("umask_zero")
def test_snapshot_output_is_0640_under_umask_0(tmp_path: Path) -> None:
    snapshot = parse_snapshot(good_snapshot())
    write_snapshot_file(tmp_path / "snapshot.json", snapshot)
    assert stat.S_IMODE((tmp_path / "snapshot.json").stat().st_mode) == 0o640


def test_snapshot_output_keeps_a_stricter_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        write_snapshot_file(tmp_path / "snapshot.json", parse_snapshot(good_snapshot()))
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "snapshot.json").stat().st_mode) == 0o600


@pytest.mark.usefixtures("umask_zero")
def test_lock_file_is_0640_under_umask_0(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.lock()
    try:
        assert stat.S_IMODE((store.directory / "lock").stat().st_mode) == 0o640
        assert (store.directory / "lock").read_text() == f"{os.getpid()}\n"
    finally:
        store.unlock()


def test_an_old_lock_file_others_could_read_is_narrowed(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o750)
    (directory / "lock").write_text("99999\n")
    (directory / "lock").chmod(0o666)
    store = StateStore(directory)
    store.lock()
    try:
        assert stat.S_IMODE((directory / "lock").stat().st_mode) == 0o640
        assert (directory / "lock").read_text() == f"{os.getpid()}\n"
    finally:
        store.unlock()


# --------------------------------------------------------------------------
# A4: explain --state-dir /nonexistent planned on an empty state and exited 0.


def _snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(good_snapshot()), encoding="utf-8")
    return path


def test_explain_refuses_a_state_directory_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = _snapshot_file(tmp_path)
    code = main(
        ["explain", "1240", "--snapshot", str(snapshot), "--config", "/dev/null", "--state-dir", "/nonexistent"]
    )
    assert code == 2
    assert _one_error_line(capsys) == "slurm-drf: input: /nonexistent: no such state directory (given with --state-dir)"


def test_explain_says_when_a_state_directory_holds_no_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = _snapshot_file(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o750)
    code = main(["explain", "1240", "--snapshot", str(snapshot), "--config", "/dev/null", "--state-dir", str(empty)])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.startswith("job 1240: account physics")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            f"{empty}: no state.json there; explaining without the daemon's state (tie wins, users' own nice)",
        )
    ]


# --------------------------------------------------------------------------
# D: a 2 MB alias-free config took 18 s in check-config; the weights' lookup scanned the accounts.


def _accounts_config(count: int) -> str:
    return "accounts:\n" + "".join(f"  account{index:06d}: {{weight: 2}}\n" for index in range(count))


@pytest.mark.parametrize(
    "verb", [["check-config", "{config}"], ["plan", "--snapshot", "{snapshot}", "--config", "{config}"]]
)
def test_a_2mb_config_is_refused_unread(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import slurm_drf.config.yaml_tree as yaml_tree

    text = _accounts_config(70_000)
    assert len(text) > 2_000_000
    config = _config(tmp_path / "etc", 0o644, text)
    parsed: list[str] = []
    monkeypatch.setattr(yaml_tree, "read_yaml", lambda text, source: parsed.append(source))
    code = main([part.format(config=config, snapshot=_snapshot_file(tmp_path)) for part in verb])
    assert code == 2
    assert parsed == []  # refused before any YAML work
    assert _one_error_line(capsys) == (
        f"slurm-drf: config: {config}: the config file is larger than 1,048,576 bytes (1 MiB), "
        "far more than a real one needs; is it the right file?"
    )


def test_a_config_just_under_the_cap_is_read(tmp_path: Path) -> None:
    from slurm_drf.config.load import MAX_CONFIG_BYTES

    text = "interval: 30s\n" + "#" * (MAX_CONFIG_BYTES - 16) + "\n"
    assert len(text) == MAX_CONFIG_BYTES - 1
    config = _config(tmp_path / "etc", 0o644, text)
    assert load_config(config, private=True).interval == 30


def test_looking_up_every_weight_is_linear_in_the_accounts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted, not timed: every (key, value) pair indexed. Scanning the
    # accounts mapping for each account's weight was count * count / 2 steps.
    import slurm_drf.config.yaml_tree as yaml_tree
    from slurm_drf.config.load import parse_config_text

    count = 1000
    steps: list[int] = []
    build_index = yaml_tree.build_index

    def counted(pairs: list[tuple[Node, Node]]) -> dict[str, tuple[Node, Node]]:
        steps.append(len(pairs))
        return build_index(pairs)

    monkeypatch.setattr(yaml_tree, "build_index", counted)
    config = parse_config_text(_accounts_config(count), "many.yaml")
    assert len(config.weights) == count
    written_pairs = 1 + count + count  # the root's, the accounts', each account's
    assert sum(steps) <= written_pairs
    assert len(steps) <= count + 2  # each mapping indexed once


# --------------------------------------------------------------------------
# B1: "Rank 1 is the account served next" was false when a tie decides: in
# the README's NSDI example rank 1 was A while order 0 is B's job 7.

EXAMPLES = REPO / "slurm_drf" / "data"


def _nsdi_plan() -> Plan:
    config = load_config(EXAMPLES / "nsdi.yaml")
    snapshot = SnapshotFileSource(EXAMPLES / "nsdi.json").fetch_snapshot()
    return compute_plan(snapshot, config)


def test_nsdi_rank_is_by_share_and_the_tie_decides_who_is_next() -> None:
    plan = _nsdi_plan()
    first = next(job for job in plan.jobs if job.order == 0)
    assert (first.job_id, first.account, first.tie) == ("7", "B", True)
    # Equal shares share a rank: A is not "served next" for coming first by name.
    assert {(a.account, a.rank, a.weighted_share) for a in plan.accounts} == {("A", 1, 0.0), ("B", 1, 0.0)}
    report = build_report(plan)
    assert [p.next_account for p in report.pools] == ["B"]
    assert render_report_json(report)["pools"][0]["next_account"] == "B"


def test_nsdi_report_marks_the_account_of_order_0_not_the_first_by_name() -> None:
    plan = _nsdi_plan()
    page = render_report(plan, "html")
    rows = re.findall(r'<tr( class="next")?>\n<td>1</td>\n<td class="text account">(\w)</td>', page)
    assert rows == [("", "A"), (' class="next"', "B")]
    assert "Rank 1 is the account served next" not in page
    assert "served next: B (order 0 of the DRF order; a tie between equal shares decided)" in page
    table = render_report(plan, "table", color=True)
    assert "\x1b[32mB" in table and "\x1b[32mA" not in table
    assert "served next: B (order 0 of the DRF order; a tie between equal shares decided)\n" in table


def test_competition_ranks_skip_after_a_tie() -> None:
    data = good_snapshot()
    # Two accounts holding the same share, between chemistry's 0 and physics' 0.25: ranks 1, 2, 2, 4.
    for job_id, account in (("2001", "alpha"), ("2002", "beta")):
        tres = {"cpu": 4, "mem": 1000, "gres/gpu": 1}
        data["jobs"].append(dict(data["jobs"][0], job_id=job_id, account=account, tres=tres))
    plan = compute_plan(parse_snapshot(data), Config())
    ranks = {a.account: a.rank for a in plan.accounts}
    assert ranks == {"chemistry": 1, "alpha": 2, "beta": 2, "physics": 4}
    assert [a.account for a in plan.accounts] == ["chemistry", "alpha", "beta", "physics"]


# --------------------------------------------------------------------------
# B2: with zero usage the dominant resource was `-` in the report and `cpu` in the plan and explain.


def test_an_account_using_nothing_has_no_dominant_resource_anywhere(tmp_path: Path) -> None:
    plan = _nsdi_plan()
    assert [a.dominant_resource for a in plan.accounts] == [None, None]
    assert [a["dominant_resource"] for a in render_plan_json(plan)["accounts"]] == [None, None]
    report = build_report(plan)
    assert [a["dominant_resource"] for a in render_report_json(report)["pools"][0]["accounts"]] == [None, None]
    assert [row.split(",")[-3] for row in render_report(plan, "csv").splitlines()[1:]] == ["", ""]
    snapshot = SnapshotFileSource(EXAMPLES / "nsdi.json").fetch_snapshot()
    explanation = explain_job(plan, snapshot, "7")
    assert render_explanation_json(explanation)["account_share"]["dominant_resource"] is None
    assert render_plan_table(plan).splitlines()[3].split()[-2] == "-"  # the dominant column of A's row
    # One without usage beside one with: each its own answer.
    used = compute_plan(parse_snapshot(good_snapshot()), Config())
    assert {a.account: a.dominant_resource for a in used.accounts} == {"chemistry": None, "physics": "gres/gpu"}


# --------------------------------------------------------------------------
# B3: memory was shown without units (`mem=512000`).


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0, "0 MiB"),
        (512, "512 MiB"),
        (1024, "1 GiB"),
        (1536, "1.5 GiB"),
        (65536, "64 GiB"),
        (64000, "62.5 GiB"),
        (512000, "500 GiB"),
        (1024 * 1024, "1 TiB"),
        (1280000, "1.2 TiB"),
    ],
)
def test_memory_is_shown_in_mib_gib_or_tib(amount: int, shown: str) -> None:
    assert format_tres("mem", amount) == shown
    assert format_tres("cpu", amount) == str(amount)  # only memory has a unit


def test_human_outputs_show_memory_units_and_json_keeps_mib() -> None:
    plan = compute_plan(parse_snapshot(good_snapshot()), Config())
    assert render_plan_table(plan).startswith("pool default: 1 node(s), cpu=64, mem=500 GiB, gres/gpu=8\n")
    report_table = render_report(plan, "table")
    assert "capacity cpu=64, mem=500 GiB, gres/gpu=8" in report_table
    assert "  64 GiB  " in report_table  # physics' 65536 MiB used
    explanation = explain_job(plan, parse_snapshot(good_snapshot()), "1240")
    text = render_explanation_text(explanation)
    assert "  demand: cpu=32, mem=256 GiB, gres/gpu=8\n" in text  # an array of 4 tasks
    assert "  mem       500 GiB   64 GiB  0.1280\n" in text
    assert render_plan_json(plan)["pools"][0]["capacity"]["mem"] == 512000
    assert render_report_json(build_report(plan))["pools"][0]["accounts"][1]["usage"]["mem"] == 65536
    assert ",65536," in render_report(plan, "csv")


# --------------------------------------------------------------------------
# C: a snapshot read from Slurm goes through the checks a snapshot file does.


def _replay_2205(squeue: dict[str, object]) -> Replay:
    return Replay(
        {
            tuple(build_squeue_argv()): json.dumps(squeue),
            tuple(build_sinfo_argv()): parse_text("22.05", "sinfo.json"),
            ("scontrol", "show", "config"): parse_text("23.02", "scontrol-show-config-basic.txt"),
        }
    )


def test_live_snapshot_with_a_job_listed_twice_is_refused() -> None:
    squeue = load_fixture("22.05", "squeue.json")
    jobs = squeue["jobs"]
    assert isinstance(jobs, list)
    # The running job 1 twice (two pending records of one id are a het job's
    # components, which the parser merges under the leader).
    jobs.append(dict(jobs[0]))
    source = CliSource(runner=_replay_2205(squeue), environ={}, clock=lambda: 0.0)
    with pytest.raises(SlurmReadError) as caught:
        source.fetch_snapshot()
    assert str(caught.value) == (
        "inconsistent data from Slurm: job 1: listed twice (jobs[0] and jobs[20]); a snapshot has one record per job"
    )


def test_live_snapshot_of_the_canned_output_passes_the_checks() -> None:
    snapshot = CliSource(
        runner=_replay_2205(load_fixture("22.05", "squeue.json")), environ={}, clock=lambda: 0.0
    ).fetch_snapshot()
    assert len(snapshot.table.job_id) == 20  # the table the checks built is the one the plan uses
    assert compute_plan(snapshot, Config()).pools[0].capacity["cpu"] == snapshot.nodes[0].tres["cpu"]


def test_live_snapshot_with_a_node_listed_twice_is_refused() -> None:
    snapshot = CliSource(
        runner=_replay_2205(load_fixture("22.05", "squeue.json")), environ={}, clock=lambda: 0.0
    ).fetch_snapshot()
    node = snapshot.nodes[0]
    with pytest.raises(SlurmReadError, match=rf"^inconsistent data from Slurm: node {node.name}: listed twice"):
        build_snapshot(SnapshotHeader("drftest", "", None), [node, node], list(snapshot.jobs), None, "")


# --------------------------------------------------------------------------
# B4, B5: the simulator's slow default and its late failure.


def test_plot_without_matplotlib_is_refused_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import slurm_drf.cli.simulate as simulate_cli

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    ran: list[object] = []
    monkeypatch.setattr(simulate_cli, "run_comparison", lambda *args: ran.append(args))
    for option in ("--plot", "--html"):
        assert main(["simulate", option, str(tmp_path / "out")]) == 2
        assert _one_error_line(capsys) == (
            f"slurm-drf: input: {option} needs matplotlib: pip install 'slurm-drf[plot]' (or pip install matplotlib)"
        )
    assert ran == []  # refused before the simulation
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "depth"), [([], 500), (["--backfill", "slurm"], 20), (["--backfill-depth", "7"], 7)])
def test_backfill_depth_defaults_by_mode(argv: list[str], depth: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import slurm_drf.cli.simulate as simulate_cli

    class Stop(Exception):
        pass

    seen: list[int] = []

    def record(workload: object, policies: object, options: SimOptions, *rest: object) -> None:
        seen.append(options.backfill_depth)
        raise Stop

    monkeypatch.setattr(simulate_cli, "run_comparison", record)
    with pytest.raises(Stop):
        main(["--debug", "simulate", *argv])
    assert seen == [depth]
