"""Slurm's text answers are split into records at "\n" only (slurm.parse.lines, issue 40).

A field of Slurm's text output (a job's name, an account, a user, a
cluster's name, a message quoting one) may hold U+2028, U+0085, a form
feed, \x1c to \x1e or a lone "\r": Slurm writes them through, and
`str.splitlines` (and `str.split()`, `str.strip()`) would split or cut
the record there. Each reader gets such a character inside a field and
must give the field whole.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from slurm_drf.cli.main import main
from slurm_drf.cycle import backends
from slurm_drf.errors import SlurmReadError
from slurm_drf.model.types import Snapshot
from slurm_drf.policy.decayed_usage import Allocation
from slurm_drf.slurm import execute
from slurm_drf.slurm.parse.assoc_mgr import parse_assoc_mgr
from slurm_drf.slurm.parse.lines import split_lines
from slurm_drf.slurm.parse.scontrol import parse_scontrol_config
from slurm_drf.slurm.sacct import parse_sacct_answer, parse_sacct_table
from slurm_drf.slurm.write import parse_update_errors

# Every character str.splitlines splits at but "\n" (and "\r\n", a line end).
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_lines_end_at_newlines_only(separator: str) -> None:
    assert split_lines(f"a{separator}b\r\nc\n\nd") == [f"a{separator}b", "c", "", "d"]
    assert split_lines("") == [""]


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_a_sacct_trace_keeps_a_field_holding_a_line_separator(separator: str) -> None:
    header = "JobID|Account|User|Submit|Elapsed|AllocTRES\n"
    text = (
        header + f"7|phys{separator}ics|al{separator}|2026-01-01T00:00:00|01:00:00|cpu=2\r\n8|lab|bob|100|00:01|cpu=1\n"
    )
    first, second = parse_sacct_table(text, "t")
    assert (first.job_id, first.account, first.user, first.submit, first.elapsed) == (
        "7",
        f"phys{separator}ics",
        f"al{separator}",  # only spaces and tabs are padding
        1_767_225_600.0,
        3600.0,
    )
    assert (second.job_id, second.account, second.allocated) == ("8", "lab", {"cpu": 1})


def test_a_sacct_trace_error_names_the_line_counting_blank_ones() -> None:
    text = "\nJobID|Account|Submit|Elapsed|AllocTRES\n\n7|a|100|01:00|cpu=1\n\n8|a|later|01:00|cpu=1\n"
    with pytest.raises(SlurmReadError, match=r"^t:6: job 8: expected a time such as"):
        parse_sacct_table(text, "t")
    with pytest.raises(SlurmReadError, match=r"^t:2: header lacks submit"):
        parse_sacct_table("\nJobID|Account|Elapsed|AllocTRES\n", "t")


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("1767225600", 1_767_225_600.0),  # SLURM_TIME_FORMAT=%s
        ("20261130101", 20_261_130_101.0),  # eleven digits: seconds, though Python 3.11 reads them as a date
        ("20261130", 1_795_996_800.0),  # eight digits that are a date: ISO 8601's basic format
        ("12345678", 12_345_678.0),  # eight that are none
        ("2026-11-30T01:00:00", 1_796_000_400.0),  # read as UTC
        ("2026-11-30T01:00:00+01:00", 1_795_996_800.0),
    ],
)
def test_a_sacct_trace_time_is_a_date_or_seconds(written: str, seconds: float) -> None:
    [job] = parse_sacct_table(f"JobID|Account|Submit|Elapsed|AllocTRES\n7|a|{written}|01:00|cpu=1\n", "t")
    assert job.submit == seconds


def test_digits_of_other_scripts_are_no_time() -> None:
    with pytest.raises(SlurmReadError, match=r"^t:2: job 7: expected a time such as"):
        parse_sacct_table("JobID|Account|Submit|Elapsed|AllocTRES\n7|a|\u0661\u0662\u0663|01:00|cpu=1\n", "t")


def test_typed_gres_of_many_names_sum_per_name_in_order() -> None:
    entries = [f"gres/g{k % 50}:t{k}={k % 3 + 1}" for k in range(500)]
    [job] = parse_sacct_table(f"JobID|Account|Submit|Elapsed|AllocTRES\n7|a|1|01:00|{','.join(entries)}\n", "t")
    totals = [name for name in job.allocated if name.count(":") == 0]
    assert totals == [f"gres/g{k}" for k in range(50)]  # in the order of their first entry
    for k in range(50):
        assert job.allocated[f"gres/g{k}"] == sum(j % 3 + 1 for j in range(k, 500, 50))


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_the_daemons_sacct_answer_keeps_a_field_holding_a_line_separator(separator: str) -> None:
    text = f"5|phys{separator}ics|gpu{separator}a|100|160|cpu=2\r\n7|lab|p|100|160|cpu=1\n"
    answer = parse_sacct_answer(text)
    assert answer.skipped == []
    assert answer.allocations == [
        Allocation(f"phys{separator}ics", f"gpu{separator}a", 100.0, 160.0, {"cpu": 2}),
        Allocation("lab", "p", 100.0, 160.0, {"cpu": 1}),
    ]


ASSOC_MGR = """Current Association Manager state

Association Records

ClusterName=c Account=root UserName= Partition= Priority=0 ID=1
    SharesRaw/Norm/Level/Factor=1/0.00/1/0.00
    ParentAccount= Lft=1 DefAssoc=No
ClusterName=c Account={account} UserName= Partition= Priority=0 ID=2
\tSharesRaw/Norm/Level/Factor=5/0.00/1/0.00
    ParentAccount=root(1) Lft=2 DefAssoc=No
ClusterName=c Account={account} UserName={user}(1001) Partition= Priority=0 ID=3
    SharesRaw/Norm/Level/Factor=3/0.00/1/0.00\r
    ParentAccount= Lft=3 DefAssoc=No
"""


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_the_account_tree_keeps_a_name_holding_a_line_separator(separator: str) -> None:
    account, user = f"phys{separator}ics", f"al{separator}ice"
    associations = parse_assoc_mgr(ASSOC_MGR.format(account=account, user=user), "c")
    assert [(a.account, a.parent, a.user, a.shares) for a in associations] == [
        ("root", None, None, 1),
        (account, "root", None, 5),
        (account, account, user, 3),
    ]


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_scontrol_show_config_keeps_a_value_holding_a_line_separator(separator: str) -> None:
    text = f"ClusterName             = my{separator}cluster\r\nPriorityWeightAge       = 1000\n"
    assert parse_scontrol_config(text) == {"ClusterName": f"my{separator}cluster", "PriorityWeightAge": "1000"}


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_scontrol_update_errors_keep_a_message_holding_a_line_separator(separator: str) -> None:
    stderr = f"Job's account phys{separator}ics is invalid for job 5\nslurm_update error: Access/permission denied\n"
    assert parse_update_errors(stderr) == (
        {"5": f"Job's account phys{separator}ics is invalid"},
        ["slurm_update error: Access/permission denied"],
    )


class FakeRun:
    def __init__(self, stderr: str) -> None:
        self.stderr = stderr

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr=self.stderr)


@pytest.mark.parametrize("separator", SEPARATORS, ids=repr)
def test_a_failed_commands_message_is_its_whole_first_line(monkeypatch: pytest.MonkeyPatch, separator: str) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(f"\nsacctmgr: account phys{separator}ics not found\nmore\n"))
    with pytest.raises(SlurmReadError) as caught:
        execute.run_command(["sacctmgr", "show", "account"], 5.0)
    assert str(caught.value) == f"sacctmgr show account: exit status 1: sacctmgr: account phys{separator}ics not found"


class FailingSource:
    name = "fake"

    def __init__(self, message: str) -> None:
        self.message = message

    def fetch_snapshot(self) -> Snapshot:
        raise SlurmReadError(self.message)


@pytest.mark.parametrize("separator", [*SEPARATORS, "\x1b[2J"], ids=repr)
def test_the_cli_says_an_error_quoting_a_line_separator_in_one_inert_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], separator: str
) -> None:
    # What run_command says of a failed squeue quotes its stderr's first line whole.
    message = f"squeue --json: exit status 1: squeue: error: account phys{separator}ics"
    monkeypatch.setattr(backends, "make_source", lambda config: FailingSource(message))
    assert main(["snapshot", "--config", "/dev/null"]) == 1
    escaped = separator.encode("unicode_escape").decode()
    assert capsys.readouterr().err == (
        f"slurm-drf: slurm read: squeue --json: exit status 1: squeue: error: account phys{escaped}ics\n"
    )
