"""The job-description corpus (tests/unit/submit/corpus.json) against a live slurmctld.

The unit tests hold slurm_drf_submit.lua to the corpus; this module holds the
corpus to Slurm. Each case of the running Slurm's release (`release`, chosen at
collection from `slurmctld -V`) is submitted held with its sbatch
arguments, and four things are compared with what the corpus says:

- the job_desc fields job_submit/lua shows slurm_job_submit (`job_desc`; a
  field the case leaves out must be its NO_VAL sentinel or nil);
- the demand `M.demand` of the shipped module computes from them, with the
  part_list slurmctld passes (`demand`, or nil and its `reason`);
- the pending job's `squeue --json` fields (`squeue`);
- the demand the daemon's reader takes from that record, by itself
  (slurm.parse.jobs) and in a snapshot (slurm.cli_source.CliSource).

To see the job_desc, the sandbox's job_submit.lua is replaced for the
module's duration by a recording script (WRAPPER below) that appends one JSON
line per submission to a file in the sandbox directory and changes nothing.
slurmctld's job_submit/lua loads a new script at the next submission when the
file's mtime is later than the loaded one's (slurm_lua_loadscript in
src/lua/slurm_lua.c: `st_mtime <= load_time` keeps the old one; the same on
22.05, 24.11 and 26.05), so each swap sets an mtime past the previous one.
The plugin runs before slurmctld validates a job, so a job naming a node the
sandbox does not have still shows its job_desc before slurmctld refuses it;
sbatch itself refuses one GRES asked with and without a type, and then
nothing reaches slurmctld. Both refusals are predicted from the case and
asserted. A GPU type the sandbox's untyped nodes lack is no refusal: 22.05
takes the job, which waits.

The sandbox is brought to the corpus's shape: four nodes and corpus.json's
`slurm_conf` (through SLURM_SANDBOX_NODES and SLURM_SANDBOX_PRIORITY_FILE,
restarting it when it is not in that shape; then partitions gpu and cpu set
and bare and whole created with scontrol). When the module ends the
original job_submit.lua is back, and the sandbox is restarted with the
environment's own shape, which rebuilds its partitions from slurm.conf; a
last submission shows the recording script is gone. It restarts the
sandbox: run it on a sandbox of its own (docs/sandbox.md) when others use
the default one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from slurm_drf.slurm.cli_source import CliSource
from slurm_drf.slurm.parse.jobs import parse_squeue_record
from tests.paths import SANDBOX_SCRIPT
from tests.unit.submit.lua import HERE, MODULE, NO_VAL, NO_VAL16, to_lua

if TYPE_CHECKING:
    from tests.integration.conftest import SlurmSandbox

CORPUS: dict[str, Any] = json.loads((HERE / "corpus.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]
RESOURCES: list[str] = CORPUS["resources"]
ACCOUNT = "gputeam"  # the sandbox's usual account, where a case names none
# The corpus's shape: four nodes (`-N 2-4`), its partitions and two settings of slurm.conf
# (`slurm_conf`): DefMemPerCPU (partition-without-default-configured's `options`, which the plugin
# cannot see) and AccountingStorageTRES (gres/gpu:a100 in the pending jobs' tres_req_str).
NODES = 4
PARTITIONS = [line for line in CORPUS["slurm_conf"] if line.startswith("PartitionName=")]
SLURM_CONF = dict(line.split("=", 1) for line in CORPUS["slurm_conf"] if line not in PARTITIONS)
SHAPE_TIMEOUT_S = 900

# Numeric job_desc fields and the sentinel the plugin shows when they are unset (harness.lua's UNSET);
# every other field the corpus uses is a string or min_mem_per_*: nil when unset.
UNSET: Mapping[str, int] = {
    "min_cpus": NO_VAL,
    "num_tasks": NO_VAL,
    "min_nodes": NO_VAL,
    "max_nodes": NO_VAL,
    "het_job_offset": NO_VAL,
    "cpus_per_task": NO_VAL16,
    "ntasks_per_node": NO_VAL16,
    "ntasks_per_tres": NO_VAL16,
    "sockets_per_node": NO_VAL16,
    "pn_min_cpus": NO_VAL16,
    "shared": NO_VAL16,
}
FIELDS: list[str] = sorted({name for case in CASES for name in case["job_desc"]} | {"pn_min_memory"})
# What the part_list shows of a partition (_part_rec_field in job_submit_lua.c), as corpus.json's part_list.
PART_FIELDS = [
    "flag_default",
    "def_mem_per_cpu",
    "def_mem_per_node",
    "max_mem_per_cpu",
    "max_mem_per_node",
    "max_share",
]
# slurmctld's refusal of a node the sandbox does not have, after the plugin; sbatch's own of one
# GRES asked with and without a type, before any RPC (gres_job_state_validate, which
# slurm_opt_create_job_desc in src/common/slurm_opt.c calls). Texts from slurm_errno.c.
INVALID_NODE = "Invalid node name specified"
MIXED_GRES = "Invalid GRES specification (with and without type identification)"


def _views() -> list[dict[str, Any]]:
    """The distinct (resources, options) the cases ask M.demand for, in corpus order."""
    views: list[dict[str, Any]] = []
    for case in CASES:
        view = _view(case)
        if view not in views:
            views.append(view)
    return views


def _view(case: Mapping[str, Any]) -> dict[str, Any]:
    return {"resources": case.get("resources", RESOURCES), "options": case.get("options", {})}


VIEWS = _views()

WRAPPER = r"""-- Written by tests/integration/test_live_submit_corpus.py in place of the sandbox's
-- job_submit.lua for the module's duration: one JSON line per submission, the job unchanged.
local CAPTURE = @CAPTURE@
local MODULE = @MODULE@
local FIELDS = @FIELDS@
local PART_FIELDS = @PART_FIELDS@
local VIEWS = @VIEWS@

local function encode(value)
	local kind = type(value)
	if kind == "nil" then
		return "null"
	elseif kind == "boolean" then
		return tostring(value)
	elseif kind == "number" then
		if value ~= value or value == math.huge or value == -math.huge then
			return '"' .. tostring(value) .. '"'
		elseif value == math.floor(value) and math.abs(value) < 2 ^ 53 then
			return string.format("%.0f", value)
		end
		return string.format("%.17g", value)
	elseif kind == "string" then
		return '"' .. (string.gsub(value, '[%c"\\]', function(c)
			return string.format("\\u%04x", string.byte(c))
		end)) .. '"'
	end
	return '"' .. kind .. '"'
end

local function object(names, get)
	local items = {}
	for _, name in ipairs(names) do
		items[#items + 1] = encode(name) .. ":" .. encode(get(name))
	end
	return "{" .. table.concat(items, ",") .. "}"
end

local loaded, M = pcall(dofile, MODULE)

local function record(job_desc, part_list)
	if not loaded then
		error("cannot load " .. MODULE .. ": " .. tostring(M))
	end
	local parts = {}
	for name, part in pairs(part_list or {}) do
		parts[#parts + 1] = encode(name) .. ":" .. object(PART_FIELDS, function(field)
			return part[field]
		end)
	end
	local demands = {}
	for index, view in ipairs(VIEWS) do
		local vector, reason = M.demand(job_desc, part_list, view.resources, view.options)
		if vector then
			local amounts = {}
			for i, amount in ipairs(vector) do
				amounts[i] = encode(amount)
			end
			demands[index] = '{"ok":[' .. table.concat(amounts, ",") .. "]}"
		else
			demands[index] = '{"nil":' .. encode(reason) .. "}"
		end
	end
	local fields = object(FIELDS, function(field)
		return job_desc[field]
	end)
	return '{"name":' .. encode(job_desc.name) .. ',"fields":' .. fields .. ',"parts":{'
		.. table.concat(parts, ",") .. '},"demands":[' .. table.concat(demands, ",") .. "]}"
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local ok, line = pcall(record, job_desc, part_list)
	if not ok then
		local named, name = pcall(function()
			return job_desc.name
		end)
		line = '{"name":' .. encode(named and name or nil) .. ',"error":' .. encode(tostring(line)) .. "}"
	end
	local file = io.open(CAPTURE, "a")
	if file then
		file:write(line, "\n")
		file:close()
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
"""


def build_wrapper(capture: Path) -> str:
    """The recording job_submit.lua: WRAPPER with the capture file, the module and what to record."""
    values = {
        "@CAPTURE@": to_lua(str(capture)),
        "@MODULE@": to_lua(str(MODULE)),
        "@FIELDS@": to_lua(FIELDS),
        "@PART_FIELDS@": to_lua(PART_FIELDS),
        "@VIEWS@": to_lua(VIEWS),
    }
    text = WRAPPER
    for key, value in values.items():
        text = text.replace(key, value)
    return text


# --------------------------------------------------------------------------
# Releases


def release_of(version_text: str) -> str | None:
    """'22.05' of 'slurm-wlm 22.05.8', 'slurm 24.11.5', 'SLURM_VERSION = 26.05.3'."""
    found = re.search(r"(\d+)\.(\d+)\.", version_text)
    return f"{int(found.group(1)):02d}.{int(found.group(2)):02d}" if found else None


def installed_release() -> str | None:
    """The release of the slurmctld on this machine, at collection; None without one.

    `slurmctld -V` answers before it reads any configuration (`sbatch --version` first looks for
    slurm.conf, which is not known yet when the sandbox's SLURM_CONF is not set).
    """
    path = shutil.which("slurmctld") or next((p for p in ("/usr/sbin/slurmctld",) if Path(p).exists()), None)
    if path is None:
        return None
    done = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30, check=False)
    return release_of(done.stdout)


COLLECTED_RELEASE = installed_release()
# The cases run here: the installed release's; every case when Slurm is not installed yet
# (the sandbox installs it), and then the other releases' skip, named, in the test.
SELECTED = [c for c in CASES if COLLECTED_RELEASE is None or c["release"] == COLLECTED_RELEASE]


# --------------------------------------------------------------------------
# What the corpus expects


def expected_fields(case: Mapping[str, Any]) -> dict[str, Any]:
    """Every recorded job_desc field as the case has it: its value, or unset as the plugin shows it."""
    job_desc: Mapping[str, Any] = case["job_desc"]
    fields = {name: job_desc.get(name, UNSET.get(name)) for name in FIELDS if name != "pn_min_memory"}
    if "min_mem_per_cpu" in job_desc:
        fields["pn_min_memory"] = float(2**63 + job_desc["min_mem_per_cpu"])
    elif "min_mem_per_node" in job_desc:
        fields["pn_min_memory"] = job_desc["min_mem_per_node"]
    else:
        fields["pn_min_memory"] = float(2**64)
    return fields


def expected_lua(case: Mapping[str, Any]) -> dict[str, Any]:
    """What the wrapper records of M.demand for the case: the amounts in the view's order, or nil."""
    if case["demand"] is None:
        return {"nil": case["reason"]}
    return {"ok": [case["demand"][r] for r in _view(case)["resources"]]}


def lua_agrees(case: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    if case["demand"] is None:
        return "nil" in live and case["reason"] in live["nil"]
    return dict(live) == expected_lua(case)


def mixes_typed_and_untyped(case: Mapping[str, Any]) -> bool:
    """Whether the case's tres_per_* fields ask one GRES both with and without a type."""
    kinds: dict[str, set[bool]] = {}
    for key in ("tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket"):
        for item in str(case["job_desc"].get(key, "")).split(","):
            if item.startswith(("gres:", "gres/")):
                parts = re.split(r"[:=]", item[len("gres:") :])
                if parts[-1].isdigit():
                    parts = parts[:-1]
                kinds.setdefault(parts[0], set()).add(len(parts) > 1)
    return any(len(typed) == 2 for typed in kinds.values())


def het_siblings(case: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cases of the same heterogeneous submission (the case alone for any other job)."""
    if "het_job_offset" not in case:
        return [dict(case)]
    return [c for c in CASES if c["sbatch"] == case["sbatch"] and "het_job_offset" in c]


def snapshot_demand(case: Mapping[str, Any]) -> dict[str, int] | None:
    """The demand the snapshot holds for the submitted id: a het job's components summed under its leader."""
    siblings = het_siblings(case)
    if any(c["demand"] is None for c in siblings):
        return None
    resources = _view(case)["resources"]
    return {r: sum(c["demand"][r] for c in siblings) for r in resources}


# --------------------------------------------------------------------------
# The sandbox in the corpus's shape


@dataclass(frozen=True)
class Capture:
    """One line of the wrapper: what slurm_job_submit was shown, and M.demand's answers."""

    name: str | None
    fields: dict[str, Any]
    parts: dict[str, dict[str, Any]]
    demands: list[dict[str, Any]]


@dataclass(frozen=True)
class Refusal:
    """A submission the sandbox refuses: the error, and whether job_submit/lua saw the job first."""

    message: str
    shown: bool


@dataclass(frozen=True)
class Submission:
    job_id: str | None  # None: sbatch was refused
    stderr: str
    captures: list[Capture]


@dataclass(frozen=True)
class CorpusSandbox:
    slurm: SlurmSandbox
    release: str
    capture: Path
    nodes: frozenset[str]

    def refusal(self, case: Mapping[str, Any]) -> Refusal | None:
        """The refusal of a case sbatch or these nodes cannot take, or None.

        A GPU type the sandbox's untyped nodes (Gres=gpu:8) do not have is not one: 22.05 takes
        the job and leaves it pending.
        """
        if mixes_typed_and_untyped(case):
            return Refusal(MIXED_GRES, shown=False)
        wanted = case["job_desc"].get("req_nodes")
        if wanted is not None:
            names = self.slurm.run("scontrol", "show", "hostnames", wanted).stdout.split()
            if not set(names) <= self.nodes:
                return Refusal(INVALID_NODE, shown=True)
        return None

    def submit(self, case: Mapping[str, Any], token: str, directory: Path) -> Submission:
        """sbatch the case held, named `token`; the wrapper's lines for it (one per het component)."""
        before = self.capture.stat().st_size if self.capture.exists() else 0
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_"))}
        env["SLURM_CONF"] = str(self.slurm.conf)
        argv = build_sbatch_argv(case["sbatch"], token)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=directory, timeout=60, check=False)
        job_id = done.stdout.strip().split(";", 1)[0] if done.returncode == 0 else None
        if job_id:
            self.slurm.submitted.add(job_id)
        with self.capture.open("rb") as file:
            file.seek(before)
            lines = file.read().decode("utf-8", "replace").splitlines()
        captures = [read_capture(line) for line in lines if line.strip()]
        return Submission(job_id, done.stderr, [c for c in captures if c.name == token])


def read_capture(line: str) -> Capture:
    data: dict[str, Any] = json.loads(line)
    assert "error" not in data, f"the recording script failed: {data['error']}"
    return Capture(data["name"], data["fields"], data["parts"], data["demands"])


def build_sbatch_argv(arguments: Sequence[str], token: str) -> list[str]:
    """sbatch with the case's arguments; each component held, named, in the sandbox's account unless it names one."""
    components: list[list[str]] = [[]]
    for argument in arguments:
        if argument == ":":
            components.append([])
        else:
            components[-1].append(argument)
    argv = ["sbatch", "--parsable", "--output=/dev/null", "--wrap=true"]
    for index, component in enumerate(components):
        if index:
            argv.append(":")
        names_account = any(a in ("-A", "--account") or a.startswith(("--account=", "-A")) for a in component)
        argv += ["-H", f"--job-name={token}", *([] if names_account else ["-A", ACCOUNT]), *component]
    return argv


def _sandbox(verb: str, env: Mapping[str, str]) -> None:
    done = subprocess.run(
        [str(SANDBOX_SCRIPT), verb], capture_output=True, text=True, env=dict(env), timeout=SHAPE_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"slurm-sandbox {verb} failed:\n{done.stdout}\n{done.stderr}"


def _node_names(slurm: SlurmSandbox) -> frozenset[str]:
    return frozenset(slurm.run("sinfo", "-h", "-N", "-o", "%N").stdout.split())


def _config_value(slurm: SlurmSandbox, key: str) -> str:
    for line in slurm.run("scontrol", "show", "config").stdout.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    return ""


def reshape(slurm: SlurmSandbox, directory: Path, stack: ExitStack) -> None:
    """The corpus's nodes and slurm.conf settings, the sandbox restarted when it lacks them.

    Whatever happens next, the sandbox is restarted with the environment's own shape when the
    stack unwinds: that also rebuilds its partitions from slurm.conf (set_partitions).
    """
    running = dict(os.environ)
    shaped = len(_node_names(slurm)) >= NODES and all(
        set(value.split(",")) <= set(_config_value(slurm, key).split(",")) for key, value in SLURM_CONF.items()
    )
    if not shaped:
        # Lines the sandbox adds to slurm.conf after its own: the later of two settings is the one Slurm
        # uses (parse_config.c: "specified more than once, latest value used"). Held jobs only: Slurm's
        # priorities do not matter here.
        priority = directory / "corpus-slurm.conf"
        lines = ["PriorityType=priority/multifactor", *(f"{k}={v}" for k, v in SLURM_CONF.items())]
        priority.write_text("\n".join(lines) + "\n", encoding="utf-8")
        running.update(SLURM_SANDBOX_NODES=str(NODES), SLURM_SANDBOX_PRIORITY_FILE=str(priority))
    stack.callback(_sandbox, "up", dict(os.environ))
    stack.callback(_sandbox, "down", running)
    if not shaped:
        _sandbox("down", os.environ)
        _sandbox("up", running)


def set_partitions(slurm: SlurmSandbox) -> None:
    """The corpus's partitions: the sandbox's updated, the others created on every node.

    scontrol's changes last until slurmctld restarts, which builds the partitions from slurm.conf again.
    """
    existing = set(slurm.run("sinfo", "-h", "-o", "%R").stdout.split())
    nodes = slurm.run("scontrol", "show", "hostlist", ",".join(sorted(_node_names(slurm)))).stdout.strip()
    for line in PARTITIONS:
        first, *options = line.split()
        name = first.split("=", 1)[1]
        if name in existing:
            slurm.run("scontrol", "update", first, *options)
        else:
            slurm.run("scontrol", "create", first, f"Nodes={nodes}", *options)


def install_wrapper(slurm: SlurmSandbox, capture: Path, stack: ExitStack) -> None:
    """The recording script in place of job_submit.lua, until the stack unwinds."""
    script = slurm.conf.parent / "job_submit.lua"
    original = script.read_bytes()
    # Each swap's mtime is past the one before: slurmctld reloads only a later one (whole seconds).
    swapped = max(int(script.stat().st_mtime) + 1, int(time.time()))
    capture.write_bytes(b"")
    script.write_text(build_wrapper(capture), encoding="utf-8")
    os.utime(script, (swapped, swapped))

    def restore() -> None:
        script.write_bytes(original)
        os.utime(script, (swapped + 1, swapped + 1))

    stack.callback(restore)


@pytest.fixture(scope="module")
def corpus(slurm_sandbox: SlurmSandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CorpusSandbox]:
    slurm = slurm_sandbox
    directory = tmp_path_factory.mktemp("corpus")
    with ExitStack() as stack:
        reshape(slurm, directory, stack)
        set_partitions(slurm)
        capture = slurm.dir / "corpus-capture.jsonl"
        install_wrapper(slurm, capture, stack)
        sandbox = CorpusSandbox(
            slurm=slurm,
            release=release_of(_config_value(slurm, "SLURM_VERSION")) or "?",
            capture=capture,
            nodes=_node_names(slurm),
        )
        yield sandbox
    # The production script is back: a submission goes through it, and the recording script sees none.
    try:
        probe = sandbox.submit({"sbatch": []}, "corpus-after", directory)
        slurm.cancel_submitted()
        assert probe.job_id is not None and probe.captures == [], f"job_submit.lua was not restored: {probe}"
    finally:
        capture.unlink(missing_ok=True)


# --------------------------------------------------------------------------
# The tests


def test_the_running_release_is_the_one_the_cases_were_chosen_for(corpus: CorpusSandbox) -> None:
    if COLLECTED_RELEASE is not None:
        assert corpus.release == COLLECTED_RELEASE
        assert [c["name"] for c in SELECTED] == [c["name"] for c in CASES if c["release"] == corpus.release]
    if corpus.release == "22.05":
        assert len(SELECTED) >= sum(c["release"] == "22.05" for c in CASES) > 0


def test_the_plugin_shows_the_corpus_partitions(corpus: CorpusSandbox, slurm: SlurmSandbox, tmp_path: Path) -> None:
    shown = corpus.submit({"sbatch": []}, "corpus-partitions", tmp_path)
    assert shown.job_id is not None and shown.captures, shown
    parts = shown.captures[0].parts
    expected = {name: {f: fields.get(f) for f in PART_FIELDS} for name, fields in CORPUS["part_list"].items()}
    assert {name: parts.get(name) for name in expected} == expected


# A release without cases of its own says so, rather than pytest's "empty parameter set".
NONE_OF_THIS_RELEASE = pytest.param(
    None,
    id="no-case-of-this-release",
    marks=pytest.mark.skip(reason=f"corpus.json has no case of release {COLLECTED_RELEASE}: none runs here"),
)


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in SELECTED] or [NONE_OF_THIS_RELEASE])
def test_a_case_is_shown_counted_and_reported_as_the_corpus_says(
    corpus: CorpusSandbox, slurm: SlurmSandbox, tmp_path: Path, case: dict[str, Any]
) -> None:
    if case["release"] != corpus.release:
        assert COLLECTED_RELEASE is None, f"collected for {COLLECTED_RELEASE}, running {corpus.release}"
        pytest.skip(f"a {case['release']} case; this Slurm is {corpus.release} (not installed at collection)")
    token = f"corpus-{os.getpid()}-{CASES.index(case)}"
    submission = corpus.submit(case, token, tmp_path)
    refusal = corpus.refusal(case)
    if refusal is not None:
        assert submission.job_id is None and refusal.message in submission.stderr, submission.stderr
        if not refusal.shown:
            # sbatch refuses it itself: nothing reaches slurmctld, nothing of the case can be seen live.
            assert submission.captures == []
            return
    else:
        assert submission.job_id is not None, submission.stderr
    offset = case.get("het_job_offset")
    shown = [c for c in submission.captures if offset is None or c.fields["het_job_offset"] == offset]
    assert shown, f"the recording script saw no submission of {token}"
    capture = shown[-1]  # sbatch may retry a submission slurmctld was too busy for
    found = compare_shown(case, capture)
    if submission.job_id is not None:
        found |= compare_reported(case, slurm, submission.job_id)
    assert not found, json.dumps({"case": case["name"], "disagreements": found}, indent=1, default=str)


def compare_shown(case: Mapping[str, Any], capture: Capture) -> dict[str, Any]:
    """Where the plugin's job_desc and M.demand's answer differ from the case."""
    found: dict[str, Any] = {}
    expected = expected_fields(case)
    fields = {k: (expected[k], capture.fields.get(k)) for k in FIELDS if expected[k] != capture.fields.get(k)}
    if fields:
        found["job_desc (corpus, live)"] = fields
        unset = expected_fields({"job_desc": {}})
        found["live job_desc"] = {k: v for k, v in capture.fields.items() if v != unset[k]}
    live = capture.demands[VIEWS.index(_view(case))]
    if not lua_agrees(case, live):
        found["lua demand (corpus, live)"] = (expected_lua(case), live)
    return found


def compare_reported(case: Mapping[str, Any], slurm: SlurmSandbox, job_id: str) -> dict[str, Any]:
    """Where the pending job's squeue record and the reader's demand differ from the case."""
    found: dict[str, Any] = {}
    record = squeue_record(slurm, job_id, case.get("het_job_offset"))
    wanted: Mapping[str, Any] = case.get("squeue", {})
    squeue = {k: (v, slurm.number(record.get(k))) for k, v in wanted.items() if slurm.number(record.get(k)) != v}
    if squeue:
        found["squeue (corpus, live)"] = squeue
    resources = _view(case)["resources"]
    if case["demand"] is not None:
        job = parse_squeue_record(record)
        assert job is not None
        read = ({r: job.tres.get(r, 0) for r in resources}, job.array_tasks)
        if read != (case["demand"], case.get("array_tasks", 1)):
            found["reader (corpus, live)"] = ((case["demand"], case.get("array_tasks", 1)), read)
    merged = snapshot_demand(case)
    if merged is not None:
        held = next((j for j in CliSource().fetch_snapshot().jobs if j.job_id == job_id), None)
        snapshot = {r: held.tres.get(r, 0) for r in resources} if held is not None else None
        if snapshot != merged:
            found["snapshot (corpus, live)"] = (merged, snapshot)
    # The live line, for the record: -rP shows it for every case, a failure beside its disagreements.
    line = {k: record.get(k) for k in ("tres_req_str", "node_count", "tasks", *wanted)}
    print(json.dumps({"case": case["name"], "live squeue": line}, default=str))
    if found:
        found["live squeue"] = line
    return found


def squeue_record(slurm: SlurmSandbox, job_id: str, offset: int | None) -> dict[str, Any]:
    """The pending job's `squeue --json` record; a het job's component by its offset."""
    for record in slurm.squeue_json():
        if offset is None and str(slurm.number(record["job_id"])) == job_id:
            return record
        leader, component = slurm.number(record.get("het_job_id")), slurm.number(record.get("het_job_offset"))
        if offset is not None and str(leader) == job_id and component == offset:
            return record
    raise AssertionError(f"squeue shows no job {job_id} (het offset {offset})")
