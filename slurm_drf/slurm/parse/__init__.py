"""Slurm's JSON and text output -> the model (Node, Job, Association, Snapshot), with no I/O.

Sits between the command runner and the snapshot: the CLI source
(`slurm.cli_source`) runs `squeue --json`, `sinfo --json` / `scontrol show
nodes --json`, `scontrol show config` and `scontrol show assoc_mgr`, decodes
the JSON, and hands the data to the readers here, which return model
objects; the pyslurm source hands them squeue-shaped records. Everything
here is pure; a test can feed it canned output captured from any Slurm
release. One module per thing read:

- `amounts`: numbers in any of Slurm's JSON spellings, TRES and GRES strings;
- `lines`: the lines of a text answer, split at "\n" only (a field may hold U+2028);
- `arrays`: a pending array's `array_task_string`;
- `envelope`: what every `--json` output has around its records (`meta`,
  `errors`);
- `jobs`: `squeue --json` records, heterogeneous jobs;
- `nodes`: `sinfo --json` and `scontrol show nodes --json`;
- `scontrol`: `scontrol show config` (priority weights and type,
  SchedulerParameters, the cluster's name);
- `assoc_mgr`: `scontrol show assoc_mgr flags=assoc`, Slurm's account tree;
- `running`: what a reclaim needs (`slurm.running` runs the commands):
  each node's free resources and each running job's allocation per node;
- `snapshot`: the Snapshot built from all of them and checked.

Formats covered (field names checked against Slurm's own source, see
tests/fixtures/README.md):

- 22.05, openapi/v0.0.38 (`src/plugins/openapi/v0.0.38/jobs.c`, `nodes.c`):
  plain numbers, null when unset (`nice` null when 0), `job_state` a string,
  node `state` a lower-case string plus a `state_flags` list, GRES in
  `tres_per_*` written `gres:gpu:4`.
- 23.02, data_parser/v0.0.39: numbers that can be unset are
  `{"set": bool, "infinite": bool, "number": N}`; times are plain.
- 23.11, v0.0.40: `job_state` is a list (`["RUNNING", "COMPLETING"]`),
  times are wrapped too, `tres_per_*` read `gres/gpu:2`.
- 24.05 to 25.11, v0.0.41 to v0.0.44: the same field names; the
  "complex" mode (`--json=v0.0.41+complex`) writes plain numbers, null for
  unset and "Infinity" for infinite, null for empty strings.
- Nodes: 22.05 `sinfo --json` and 23.02+ `scontrol show nodes --json` give
  one record per node under `nodes`; 23.02+ `sinfo --json` groups nodes
  under `sinfo` records (also understood, as a fallback).

A job, node or association record that cannot be understood is skipped
with a warning naming it; it never stops the others from being read.
"""
