"""Hostile input that would cost unbounded time or memory, or inject into outputs.

Each test feeds the exact input the issue "Hostile and inconsistent input"
names and checks for a clear, bounded refusal (or neutral output).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from slurm_drf.cli.main import main
from slurm_drf.config.load import parse_config_text
from slurm_drf.config.settings import default_config
from slurm_drf.config.yaml_tree import check_expanded_size
from slurm_drf.errors import ConfigError, SnapshotError, shorten
from slurm_drf.model.snapshot_file import SnapshotFileSource
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.plan import Plan, compute_plan
from slurm_drf.sim.engine import simulate
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.policies import POLICIES, build_policy
from slurm_drf.sim.run_metrics import compute_metrics
from slurm_drf.sim.workload import NodeType, Workload, WorkloadJob
from slurm_drf.trail.audit_query import render_audit
from slurm_drf.trail.explain import explain_job
from slurm_drf.trail.explain_render import render_explanation_text
from slurm_drf.trail.plan_output import render_plan_json, render_plan_table
from slurm_drf.trail.share_report import render_report
from slurm_drf.trail.text import csv_cell, markdown_cell, terminal_text
from tests.unit.builders import job, node, snapshot


def alias_bomb(levels: int = 9) -> str:
    """`levels` anchors, each a list of nine aliases of the one before: 9**levels values."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghijklmnop"
    for index in range(1, levels):
        aliases = ",".join([f"*{names[index - 1]}"] * 9)
        lines.append(f"{names[index]}: &{names[index]} [{aliases}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9) -> str:
    """The same through `<<` merge keys, which PyYAML flattens before constructing."""
    lines = ["a: &a {x: 1, y: 2}"]
    names = "abcdefghijklmnop"
    for index in range(1, levels):
        aliases = ",".join([f"*{names[index - 1]}"] * 9)
        lines.append(f"{names[index]}: &{names[index]} {{<<: [{aliases}]}}")
    return "\n".join(lines) + "\n"


def compose(text: str) -> yaml.Node:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert node is not None
    return node


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            alias_bomb(),
            "this value expands to more than 100000 values through aliases; write the config without nested aliases",
        ),
        (
            merge_bomb(),
            "this mapping merges more than 100000 keys through aliases; write the config without nested merges",
        ),
    ],
    ids=["alias-bomb", "merge-bomb"],
)
def test_yaml_alias_bomb_is_refused_quickly(text: str, message: str) -> None:
    assert len(text.encode()) < 400
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "bomb.yaml")
    assert str(caught.value) == f"bomb.yaml:6: YAML: {message}"


def test_yaml_alias_bomb_check_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"slurm-drf: config: {path}:6: YAML: this value expands to more than 100000 values")


def test_yaml_small_aliases_still_load() -> None:
    # Anchors used as intended (a few shared values) stay well inside the budget.
    text = "accounts:\n  physics: &w {weight: 2}\n  chemistry: *w\n  biology:\n    <<: *w\n"
    config = parse_config_text(text, "ok.yaml")
    assert config.weights == {"physics": 2, "chemistry": 2, "biology": 2}


def test_yaml_long_list_without_aliases_is_not_an_alias_bomb() -> None:
    # Over the budget but written out: aliases added nothing, so no refusal.
    text = "exclude_accounts:\n" + "".join(f"  - a{index}\n" for index in range(300))
    check_expanded_size(compose(text), "long.yaml", budget=100)
    with pytest.raises(ConfigError, match=r"^long\.yaml:3: YAML: this value expands to more than 100 values"):
        check_expanded_size(compose(alias_bomb(3)), "long.yaml", budget=100)


def test_snapshot_dev_zero_is_refused_with_bounded_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--snapshot", "/dev/zero", "--config", "/dev/null", "--max-snapshot-mb", "4"])
    assert code == 2
    assert capsys.readouterr().err == (
        "slurm-drf: snapshot: /dev/zero: larger than the 4 MiB a snapshot may be; "
        "if it really is one, raise the limit with --max-snapshot-mb\n"
    )


@pytest.mark.parametrize("verb", [["report"], ["explain", "1"]])
def test_snapshot_limit_applies_to_report_and_explain(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (1024 * 1024 + 1))
    code = main([*verb, "--snapshot", str(path), "--config", "/dev/null", "--max-snapshot-mb", "1"])
    assert code == 2
    assert f"{path}: larger than the 1 MiB a snapshot may be" in capsys.readouterr().err


def test_snapshot_limit_default_allows_the_benchmark_size() -> None:
    source = SnapshotFileSource("x.json")
    assert source.max_bytes >= 10 * 40 * 1024 * 1024


def test_snapshot_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "exact.json"
    path.write_bytes(b"[]" + b" " * 98)
    with pytest.raises(SnapshotError) as caught:
        SnapshotFileSource(path, max_bytes=100).fetch_snapshot()
    # Read whole (exactly the limit), then refused for what it says, not its size.
    assert "larger than" not in str(caught.value)


# --------------------------------------------------------------------------
# The simulator: bounded times and sizes, idle stretches for free

SWF_HEADER = "; MaxNodes: 4\n; MaxProcs: 256\n"


def swf_line(job: int, submit: str, runtime: str) -> str:
    return f"{job} {submit} 0 {runtime} 8 -1 -1 8 -1 -1 1 {job} {job} -1 -1 -1 -1 -1\n"


def simulate_cli(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["simulate", "--workload", str(path), "--format", "json", "--no-series", *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "runtime.swf",
            SWF_HEADER + swf_line(1, "0", "1e300"),
            "runtime.swf: job 1: run time 1e+300 s; the simulator takes at most 31622400 s (366d00h)",
        ),
        (
            "apart.swf",
            SWF_HEADER + swf_line(1, "0", "60") + swf_line(2, "1e15", "60"),
            "apart.swf: job 2: submitted 1e+15 s after the first job; "
            "the simulator takes submissions within 316224000 s (3660d00h)",
        ),
        (
            "elapsed.txt",
            "JobID|Account|User|Submit|Start|Elapsed|Timelimit|State|AllocTRES\n"
            "7|physics|alice|2026-01-01T00:00:00|2026-01-01T00:00:00|99999999-00:00:00|UNLIMITED|COMPLETED|"
            "cpu=1,mem=1G,node=1\n",
            "elapsed.txt: job 7: run time 8.64e+12 s; the simulator takes at most 31622400 s (366d00h)",
        ),
        (
            "maxnodes.swf",
            "; MaxNodes: 1000000000000\n; MaxProcs: 64000000000000\n" + swf_line(1, "0", "60"),
            "maxnodes.swf: 1000000000000 nodes; the simulator takes at most 1,000,000",
        ),
    ],
    ids=["swf-runtime-1e300", "swf-submits-1e15-apart", "sacct-elapsed-99999999-days", "swf-maxnodes-1e12"],
)
def test_simulator_refuses_extreme_traces_quickly(
    name: str, text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = simulate_cli(path, capsys)
    assert (code, out) == (2, "")
    assert err == f"slurm-drf: workload: {message}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", str(10**12)], "scenario mixed: 1000000000000 nodes; the simulator takes at most 1,000,000"),
        (["--jobs", str(10**12)], "scenario mixed: 1000000000000 jobs; the simulator takes at most 10,000,000"),
    ],
    ids=["nodes-1e12", "jobs-1e12"],
)
def test_simulator_refuses_huge_scenarios_before_allocating(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *argv, "--format", "json"]) == 2
    assert capsys.readouterr().err == f"slurm-drf: workload: {message}\n"


def test_simulator_jumps_over_a_year_of_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two jobs a year apart used to take minutes: a tick every 60 s in between (that the
    # idle ticks are jumped over, counted not sampled, is the next test's).
    path = tmp_path / "year.swf"
    year = 365 * 86_400
    path.write_text(SWF_HEADER + swf_line(1, "0", "60") + swf_line(2, str(year), "60"))
    code, out, _ = simulate_cli(path, capsys)
    assert code == 0
    data = json.loads(out)
    for policy in data["policies"]:
        assert policy["makespan_s"] == year + 60
        assert policy["mean_wait_s"] == 0
        # Job 1 holds 8 of 256 CPUs for the first tick only, job 2 for the tick at its
        # submission: 2 of the year's ticks (every skipped one counts as zero use).
        ticks = year // 60 + 2
        assert policy["utilisation_overall"]["cpu"] == round(2 * 8 / 256 / ticks, 4)


def test_idle_ticks_are_counted_not_sampled() -> None:
    jobs = tuple(
        WorkloadJob(str(number), "a", "u", submit, 60.0, 60.0, 1, 1, 0)
        for number, submit in enumerate((0.0, 30_000.0, 30_030.0))
    )
    workload = Workload("gap", "two bursts", jobs, 1, NodeType(cpu=1, mem=1, gpu=0))
    for policy in POLICIES:
        result = simulate(workload, build_policy(policy), SimOptions(interval=60))
        # Ticks 0 .. 502 (30,120 s): the first idle one sampled (60 s), the next
        # 498 (120 s .. 29,940 s) jumped over, back at the submission (tick 500).
        assert len(result.sample_time) + result.idle_ticks == 503
        assert result.idle_ticks == 498
        assert result.sample_time.tolist()[:3] == [0.0, 60.0, 30_000.0]
        assert result.start.tolist() == [0.0, 30_000.0, 30_060.0]
        metrics = compute_metrics(result)
        assert metrics.utilisation_overall["cpu"] == pytest.approx(3 / 503)


# --------------------------------------------------------------------------
# Injection into outputs: names from Slurm are data, never markup or commands

FORMULAS = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]
MARKUP = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "a|b", "[x](javascript:y)"]
CONTROLS = ["forged\nline", "esc\x1b[2J\x1b]0;title\x07", "nul\x00byte", "rtl\u202eoverride", "del\x7f\x9b"]
HOSTILE = FORMULAS + MARKUP + CONTROLS


def hostile_plan() -> tuple[Plan, Snapshot]:
    jobs = [job(name, "PENDING", job_id=str(100 + index), cpu=1) for index, name in enumerate(HOSTILE)]
    jobs.append(job(HOSTILE[0], "RUNNING", job_id="99", cpu=2))
    snap = snapshot([node("n1", cpu=64)], jobs)
    return compute_plan(snap, default_config()), snap


def test_text_helpers_on_each_hostile_name() -> None:
    assert terminal_text("forged\nline") == "forged\\nline"
    assert terminal_text("esc\x1b[2J\x07") == "esc\\x1b[2J\\x07"
    assert terminal_text("nul\x00\x7f\x9b\u202e") == "nul\\x00\\x7f\\x9b\\u202e"
    assert markdown_cell("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert markdown_cell("a|b\nc") == "a\\|b\\\\nc"
    for formula in FORMULAS[:4]:
        assert csv_cell(formula) == "'" + formula
    assert (csv_cell("\tTAB"), csv_cell("\rCR"), csv_cell("a\nb")) == ("'\\tTAB", "'\\rCR", "a\\nb")
    assert (csv_cell("physics"), csv_cell(-1), csv_cell(2.5)) == ("physics", -1, 2.5)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\u061cA", "\\u061cA"),  # ARABIC LETTER MARK (Cf), which the bidi list missed
        ("a\u200bb", "a\\u200bb"),  # zero width space
        ("\ufeffbom", "\\ufeffbom"),
        ("soft\u00adhyphen", "soft\\xadhyphen"),
        ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
        ("tag\U000e0041", "tag\\U000e0041"),  # a Unicode tag character
        ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
        ("lone\ud800", "lone\\ud800"),  # a surrogate no terminal encoding can write
        ("physique-é 日本 Ωmega", "physique-é 日本 Ωmega"),  # printable letters stay as they are
    ],
)
def test_every_invisible_format_character_is_escaped(text: str, shown: str) -> None:
    """Issue 22, item 10: Unicode category Cf (and line separators, surrogates), not a hand-kept list."""
    assert terminal_text(text) == shown
    assert terminal_text(text).isprintable()


def test_report_csv_neutralises_formulas() -> None:
    plan, _ = hostile_plan()
    rows = list(csv.reader(io.StringIO(render_report(plan, "csv"))))
    accounts = {row[2] for row in rows[1:]}
    assert accounts == {csv_cell(f) for f in HOSTILE}
    assert '\'=HYPERLINK("http://x","y")' in accounts and "forged\\nline" in accounts
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows[1:] for cell in row)


def test_report_markdown_and_html_escape_markup() -> None:
    plan, _ = hostile_plan()
    markdown = render_report(plan, "markdown")
    page = render_report(plan, "html")
    for text in (markdown, page):
        assert "<script" not in text and "<img" not in text
        assert "\x1b" not in text and "\x00" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    # One table row per account: no name breaks a row or a line.
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| rank")]
    assert len(rows) == len(HOSTILE)
    assert all(line.count(" | ") == rows[0].count(" | ") for line in rows)


def is_inert(text: str) -> bool:
    """No control character but the newlines between lines."""
    return not any(ch != "\n" and (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch == "\u202e") for ch in text)


def test_table_outputs_escape_control_characters() -> None:
    plan, snap = hostile_plan()
    report_table = render_report(plan, "table")
    plan_table = render_plan_table(plan, 0)
    explained = render_explanation_text(explain_job(plan, snap, "110"))  # the "forged\nline" account
    for text in (report_table, plan_table, explained):
        assert is_inert(text)
        assert "forged\\nline" in text or text is explained
    assert "account forged\\nline," in explained
    # As many lines as without the hostile names: each account's row is one line.
    assert sum("esc\\x1b[2J" in line for line in report_table.splitlines()) == 1


def test_report_table_in_colour_keeps_only_its_own_escapes() -> None:
    plan, _ = hostile_plan()
    coloured = render_report(plan, "table", color=True)
    assert "\x1b[2J" not in coloured and "\x1b]0;" not in coloured
    assert "esc\\x1b[2J\\x1b]0;title\\x07" in coloured


def test_audit_csv_and_table_escape_names() -> None:
    records = [{"time": "2026-11-30T00:00:00Z", "job_id": "1", "account": name, "value": 5} for name in HOSTILE]
    rows = list(csv.reader(io.StringIO(render_audit(records, "csv"))))
    assert {row[rows[0].index("account")] for row in rows[1:]} == {csv_cell(f) for f in HOSTILE}
    assert len(rows) == 1 + len(HOSTILE)
    table = render_audit(records, "table")
    assert is_inert(table)
    assert len(table.splitlines()) == 2 + len(HOSTILE)


def test_json_outputs_stay_exact() -> None:
    plan, _ = hostile_plan()
    data = json.loads(render_report(plan, "json"))
    names = {a["account"] for pool in data["pools"] for a in pool["accounts"]}
    assert names == set(HOSTILE)
    planned = {j["account"] for j in render_plan_json(plan)["jobs"]}
    assert planned == set(HOSTILE)


def test_a_5mb_tres_value_becomes_a_short_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot_text = (
        '{"format": "slurm-drf-snapshot/1", "cluster": "c", "taken_at": "2026-11-30T00:00:00Z", '
        '"nodes": [{"name": "n1", "partitions": ["p"], "state": "idle", "tres": {"cpu": 64}}], '
        '"jobs": [{"job_id": "1", "account": "a", "user": "u", "partition": "p", "state": "PENDING", '
        '"priority": 1, "nice": 0, "held": false, "submit_time": "2026-11-30T00:00:00Z", "array_tasks": 1, '
        '"tres": {"cpu": "' + "x" * 5_000_000 + '"}}]}'
    )
    path = tmp_path / "big.json"
    path.write_text(snapshot_text)
    assert main(["plan", "--snapshot", str(path), "--config", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert len(err) < 600
    # The snapshot parser shows the value cut short itself (errors.shorten,
    # the CLI's cut of every line, is the backstop: the next test).
    assert err.startswith(f"slurm-drf: snapshot: {path}: job 1.tres.cpu: expected a number, got 'xxx")
    assert "..." in err


def test_shorten_keeps_short_text_and_both_ends() -> None:
    assert shorten("short") == "short"
    text = "head" + "x" * 1000 + "tail"
    short = shorten(text, 100)
    assert short.startswith("headxx") and short.endswith("xxtail")
    assert f"({len(text) - 100} characters left out)" in short
