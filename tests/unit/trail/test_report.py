"""The share report of a known snapshot, field by field in every format.

The expected rows are worked out by hand from tests/fixtures/report
(snapshot.json, config.yaml), not taken from the engine: two pools, a
drained node left out of capacity, weights 2 and 0.5, an account with no
usage, a held job and a job in an unmanaged partition.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from slurm_drf.cli.trail import use_color
from slurm_drf.policy.plan import Plan
from slurm_drf.trail.plan_output import ordered_job_count, render_plan_json, render_plan_table
from slurm_drf.trail.share_report import (
    RESOURCE_COLOURS,
    TABLE_HEADER_COLOUR,
    build_report,
    chart_scale,
    render_report,
    render_report_table,
)
from slurm_drf.trail.text import format_tres, format_weight, render_table
from tests.helpers import load_report_plan, run_observe_verb
from tests.paths import FIXTURES

FIXTURES = FIXTURES / "report"
RESOURCES = ("cpu", "mem", "gres/gpu")
CAPACITY = {"gpu": {"cpu": 128, "mem": 1024000, "gres/gpu": 16}, "cpu": {"cpu": 128, "mem": 256000, "gres/gpu": 0}}

# pool, rank, account, weight, running, pending, usage (cpu, mem, gpu), dominant, weighted share
_ROWS = [
    ("gpu", 1, "newteam", 1.0, 0, 1, (0, 0, 0), None, 0.0),
    ("gpu", 2, "physics", 2.0, 2, 2, (24, 147456, 6), "gres/gpu", 0.1875),
    ("gpu", 3, "r&d", 1.0, 1, 0, (4, 409600, 1), "mem", 0.4),
    ("gpu", 4, "chemistry", 0.5, 1, 1, (48, 65536, 1), "cpu", 0.75),
    ("cpu", 1, "newteam", 1.0, 0, 1, (0, 0, 0), None, 0.0),
    ("cpu", 2, "biology", 1.0, 1, 1, (64, 64000, 0), "cpu", 0.5),
    # 206 is held: not counted as pending.
    ("cpu", 3, "chemistry", 0.5, 1, 0, (16, 128000, 0), "mem", 1.0),
]


def _expected() -> list[dict[str, Any]]:
    rows = []
    for pool, rank, account, weight, running, pending, usage, dominant, weighted in _ROWS:
        capacity = CAPACITY[pool]
        shares = {r: (u / capacity[r] if capacity[r] else 0.0) for r, u in zip(RESOURCES, usage, strict=True)}
        rows.append(
            {
                "pool": pool,
                "rank": rank,
                "account": account,
                "weight": weight,
                "running": running,
                "pending": pending,
                "usage": dict(zip(RESOURCES, usage, strict=True)),
                "shares": shares,
                "dominant": dominant,
                "dominant_share": shares[dominant] if dominant else 0.0,
                "weighted": weighted,
            }
        )
    return rows


EXPECTED = _expected()


@pytest.fixture(scope="module")
def plan() -> Plan:
    return load_report_plan()[0]


def test_expected_rows_are_consistent() -> None:
    # The hand-written weighted shares agree with dominant share / weight.
    for row in EXPECTED:
        assert row["weighted"] == pytest.approx(row["dominant_share"] / row["weight"])


def _text_cells(row: dict[str, Any]) -> list[str]:
    """The cells the human formats show for an expected row."""
    return [
        str(row["rank"]),
        row["account"],
        format_weight(row["weight"]),
        str(row["running"]),
        str(row["pending"]),
        *(format_tres(r, row["usage"][r]) for r in RESOURCES),
        *(f"{row['shares'][r]:.4f}" for r in RESOURCES),
        row["dominant"] or "-",
        f"{row['dominant_share']:.4f}",
        f"{row['weighted']:.4f}",
    ]


HEADERS = [
    "rank",
    "account",
    "weight",
    "running",
    "pending",
    "cpu used",
    "mem used",
    "gres/gpu used",
    "cpu share",
    "mem share",
    "gres/gpu share",
    "dominant",
    "dominant share",
    "weighted share",
]


# --- JSON -----------------------------------------------------------------------------


def test_json_report_field_by_field(plan: Plan) -> None:
    data = json.loads(render_report(plan, "json"))
    assert data["format"] == "slurm-drf-report/1"
    assert data["cluster"] == "drftest"
    assert data["taken_at"] == "2026-11-30T02:00:00Z"
    assert data["resources"] == list(RESOURCES)
    assert [p["name"] for p in data["pools"]] == ["gpu", "cpu"]
    assert [p["nodes"] for p in data["pools"]] == [2, 1]
    for pool in data["pools"]:
        assert pool["capacity"] == CAPACITY[pool["name"]]
    got = [(pool["name"], account) for pool in data["pools"] for account in pool["accounts"]]
    assert len(got) == len(EXPECTED)
    for (pool, account), row in zip(got, EXPECTED, strict=True):
        assert pool == row["pool"]
        assert account["rank"] == row["rank"]
        assert account["account"] == row["account"]
        assert account["weight"] == row["weight"]
        assert account["running_jobs"] == row["running"]
        assert account["pending_jobs"] == row["pending"]
        assert account["usage"] == row["usage"]
        assert account["shares"] == row["shares"]  # exact: same divisions
        assert account["dominant_resource"] == row["dominant"]
        assert account["dominant_share"] == row["dominant_share"]
        assert account["weighted_share"] == row["weighted"]


# --- CSV ------------------------------------------------------------------------------


def test_csv_report_field_by_field(plan: Plan) -> None:
    text = render_report(plan, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == [
        "pool",
        "rank",
        "account",
        "weight",
        "running_jobs",
        "pending_jobs",
        "usage:cpu",
        "usage:mem",
        "usage:gres/gpu",
        "share:cpu",
        "share:mem",
        "share:gres/gpu",
        "dominant_resource",
        "dominant_share",
        "weighted_share",
    ]
    assert len(rows) == len(EXPECTED)
    for got, row in zip(rows, EXPECTED, strict=True):
        assert got["pool"] == row["pool"]
        assert int(got["rank"]) == row["rank"]
        assert got["account"] == row["account"]
        assert float(got["weight"]) == row["weight"]
        assert int(got["running_jobs"]) == row["running"]
        assert int(got["pending_jobs"]) == row["pending"]
        for r in RESOURCES:
            assert int(got[f"usage:{r}"]) == row["usage"][r]
            assert float(got[f"share:{r}"]) == row["shares"][r]  # repr round-trips exactly
        assert got["dominant_resource"] == (row["dominant"] or "")
        assert float(got["dominant_share"]) == row["dominant_share"]
        assert float(got["weighted_share"]) == row["weighted"]


# --- markdown ---------------------------------------------------------------------------


def _markdown_tables(text: str) -> dict[str, list[list[str]]]:
    """Pool name -> rows of cells (header and alignment row included) of each `## Pool` table."""
    tables: dict[str, list[list[str]]] = {}
    pool = None
    for line in text.splitlines():
        if line.startswith("## Pool "):
            pool = line.removeprefix("## Pool ")
            tables[pool] = []
        elif line.startswith("|") and pool is not None:
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            tables[pool].append([c.strip().replace("\\|", "|").replace("\\\\", "\\") for c in cells])
    return tables


def test_markdown_report_field_by_field(plan: Plan) -> None:
    tables = _markdown_tables(render_report(plan, "markdown"))
    assert list(tables) == ["gpu", "cpu"]
    for pool, rows in tables.items():
        assert rows[0] == HEADERS
        # Numbers right-aligned, text left.
        assert rows[1] == [":---" if h in ("account", "dominant") else "---:" for h in HEADERS]
        assert rows[2:] == [_text_cells(r) for r in EXPECTED if r["pool"] == pool]


def test_markdown_escapes_pipes(plan: Plan) -> None:
    from dataclasses import replace

    odd = replace(plan, accounts=tuple(replace(a, account="a|b") if a.account == "r&d" else a for a in plan.accounts))
    tables = _markdown_tables(render_report(odd, "markdown"))
    assert [row[1] for row in tables["gpu"][2:]] == ["newteam", "physics", "a|b", "chemistry"]


# --- HTML -------------------------------------------------------------------------------


class _Page(HTMLParser):
    """Tables (per pool section), SVG bars and the tags used, from the report page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.sections: list[str] = []
        self.tables: list[list[list[tuple[str, str]]]] = []  # table -> row -> (text, class)
        self.bars: list[dict[str, str]] = []
        self.marks = 0
        self._cell: list[str] | None = None
        self._cell_class = ""
        self._in_bar = False
        self._bar_title: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.add(tag)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell, self._cell_class = [], a.get("class", "")
        elif tag == "rect" and "bar" in a.get("class", "").split():
            self.bars.append(a)
            self._in_bar = True
        elif tag == "title" and self._in_bar:
            self._bar_title = []
        elif tag == "path" and a.get("class") == "dominant-mark":
            self.marks += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(("".join(self._cell), self._cell_class))
            self._cell = None
        elif tag == "title" and self._bar_title is not None:
            self.bars[-1]["title"] = "".join(self._bar_title)
            self._bar_title = None
        elif tag == "rect":
            self._in_bar = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._bar_title is not None:
            self._bar_title.append(data)


def _page(plan: Plan) -> tuple[str, _Page]:
    text = render_report(plan, "html")
    page = _Page()
    page.feed(text)
    page.close()
    return text, page


def test_html_tables_field_by_field(plan: Plan) -> None:
    _, page = _page(plan)
    assert page.sections == ["pool-gpu", "pool-cpu"]
    assert len(page.tables) == 2
    for pool, table in zip(("gpu", "cpu"), page.tables, strict=True):
        assert [text for text, _ in table[0]] == HEADERS
        expected = [r for r in EXPECTED if r["pool"] == pool]
        assert [[text for text, _ in row] for row in table[1:]] == [_text_cells(r) for r in expected]
        for row, want in zip(table[1:], expected, strict=True):
            marked = [HEADERS[i] for i, (_, classes) in enumerate(row) if "dominant" in classes.split()]
            assert marked == ([f"{want['dominant']} share"] if want["dominant"] else [])


def test_html_chart_bars_follow_the_shares(plan: Plan) -> None:
    _, page = _page(plan)
    # gpu pool: 4 accounts x 3 resources; cpu pool has no GPUs: 3 accounts x 2 resources.
    assert len(page.bars) == 4 * 3 + 3 * 2
    report = build_report(plan)
    colour = dict(zip(RESOURCES, RESOURCE_COLOURS, strict=False))
    bars = iter(page.bars)
    for pool in report.pools:
        scale = chart_scale(pool.accounts, RESOURCES)
        for row in (r for r in EXPECTED if r["pool"] == pool.pool.name):
            for resource in RESOURCES:
                if CAPACITY[pool.pool.name][resource] == 0:
                    continue
                bar = next(bars)
                assert bar["title"].startswith(f"{row['account']} {resource}: ")
                assert bar["fill"] == colour[resource]
                assert float(bar["width"]) == pytest.approx(620 * row["shares"][resource] / scale, abs=0.06)
                dominant = resource == row["dominant"]
                assert ("dominant" in bar["class"].split()) is dominant
                assert bar["title"].endswith("(dominant)") is dominant
                assert ("stroke" in bar) is dominant
    # One marker per account with a dominant resource.
    assert page.marks == sum(1 for r in EXPECTED if r["dominant"])


def test_html_is_self_contained_and_escaped(plan: Plan) -> None:
    text, page = _page(plan)
    assert {"script", "link", "img", "iframe"}.isdisjoint(page.tags)
    assert "<style>" in text and "<svg" in text
    assert re.findall(r"https?://[^\"' ]+", text) == ["http://www.w3.org/2000/svg"] * 2
    assert "r&amp;d" in text and "r&d" not in text.replace("r&amp;d", "")
    assert TABLE_HEADER_COLOUR in text


# --- table ------------------------------------------------------------------------------


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _table_rows(text: str) -> dict[str, list[list[str]]]:
    tables: dict[str, list[list[str]]] = {}
    pool = None
    for line in text.splitlines():
        if line.startswith("pool "):
            pool = line.split(":")[0].removeprefix("pool ")
            tables[pool] = []
        elif pool is not None and line and not line.startswith(("rank", "-", "served next: ")):
            # Columns are two spaces apart at least; a cell may hold one (`144 GiB`).
            tables[pool].append(re.split(r"\s{2,}", line.strip()))
    return tables


def test_table_report_field_by_field(plan: Plan) -> None:
    text = render_report(plan, "table")
    assert not ANSI.search(text)
    tables = _table_rows(text)
    assert list(tables) == ["gpu", "cpu"]
    for pool, rows in tables.items():
        assert rows == [_text_cells(r) for r in EXPECTED if r["pool"] == pool]


def test_table_columns_are_aligned(plan: Plan) -> None:
    lines = render_report(plan, "table").splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    rule = lines[lines.index(header) + 1]
    # Every column ends where its rule ends (numbers right-aligned) or starts where it starts (text).
    starts = [m.start() for m in re.finditer(r"-+", rule)]
    ends = [m.end() for m in re.finditer(r"-+", rule)]
    for line in lines[lines.index(header) + 2 : lines.index(header) + 6]:
        for index, name in enumerate(HEADERS):
            if name in ("account", "dominant"):
                assert line[starts[index]] != " "
            else:
                assert line[ends[index] - 1] != " "


def test_colour_changes_nothing_but_escapes(plan: Plan) -> None:
    report = build_report(plan)
    coloured = render_report_table(report, color=True)
    assert ANSI.search(coloured)
    assert ANSI.sub("", coloured) == render_report_table(report, color=False)
    # The dominant share of physics (gres/gpu 0.3750) is highlighted.
    physics = next(line for line in coloured.splitlines() if "physics" in line)
    assert "\x1b[1;33m        0.3750\x1b[0m" in physics


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("choice", "tty", "env", "expected"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        ("always", False, {"NO_COLOR": "1"}, True),
        ("never", True, {}, False),
    ],
)
def test_use_color(choice: str, tty: bool, env: dict[str, str], expected: bool) -> None:
    assert use_color(choice, _Stream(tty), env) is expected


def test_unknown_format_is_refused(plan: Plan) -> None:
    with pytest.raises(ValueError, match="unknown report format"):
        render_report(plan, "pdf")


# --- the plan renderers keep their behaviour -----------------------------------------------


def test_plan_json_shape_is_unchanged(plan: Plan) -> None:
    data = render_plan_json(plan)
    assert data["format"] == "slurm-drf-plan/1"
    assert list(data) == [
        "format",
        "cluster",
        "taken_at",
        "mode",
        "epoch",
        "resources",
        "pools",
        "accounts",
        "jobs",
        "warnings",
    ]
    # The plan keeps the engine's dominant resource; only the report drops it for zero use.
    assert [a["account"] for a in data["accounts"]] == [r["account"] for r in EXPECTED]
    jobs = {j["job_id"]: j for j in data["jobs"]}
    assert [j["job_id"] for j in data["jobs"] if j["action"] != "skip"] == ["203", "201", "204", "202", "207", "205"]
    assert jobs["206"]["reason"] == "held" and jobs["208"]["reason"] == "partition not managed"
    assert "nice" in jobs["203"]
    assert ordered_job_count(plan) == 6


def test_plan_table_and_render_table_unchanged(plan: Plan) -> None:
    assert render_table(["a", "n"], [["x", 1], ["yy", 22]]) == "a    n\n--  --\nx    1\nyy  22"
    text = render_plan_table(plan)
    assert text.startswith("pool gpu: 2 node(s), cpu=128, mem=1000 GiB, gres/gpu=16\n")
    assert "skipped: 1 held, 1 partition not managed" in text
    assert text.rstrip().endswith(
        "6 write(s) needed, mode nice; held in exactly this order whatever Slurm's other factors add (the exact "
        "band, `horizon`): gpu's first 4 of up to 1000, neighbours 1 apart, cpu's first 2 of up to 1000, "
        "neighbours 1 apart"
    )


# --- the verb -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown", "html"])
def test_report_verb_writes_the_file(tmp_path: Path, fmt: str, plan: Plan) -> None:
    out = tmp_path / f"report.{fmt}"
    code = run_observe_verb(
        [
            "report",
            "--snapshot",
            str(FIXTURES / "snapshot.json"),
            "--config",
            str(FIXTURES / "config.yaml"),
            "--format",
            fmt,
            "--output",
            str(out),
            "--color",
            "always",
        ]
    )
    assert code == 0
    # A file never gets colour, whatever --color says for terminals.
    assert out.read_text() == render_report(plan, fmt)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left beside it


def test_report_verb_prints_without_colour_off_a_terminal(capsys: pytest.CaptureFixture[str], plan: Plan) -> None:
    assert (
        run_observe_verb(
            ["report", "--snapshot", str(FIXTURES / "snapshot.json"), "--config", str(FIXTURES / "config.yaml")]
        )
        == 0
    )
    assert capsys.readouterr().out == render_report(plan, "table")
