"""The cluster simulator behind `slurm-drf simulate`: what DRF would do, before installing it.

Flow, one way: a workload (`scenarios` builds one from a seed, `importers`
reads sacct or SWF history; both yield `workload.Workload`) is played by
`engine.simulate` on a `cluster.Cluster` under one `policies.Policy` (fifo,
multifactor, drf, drf-history, drf-naive, the daemon's loop); the engine
records starts, ends and sampled shares in an `options.SimResult`; `run_metrics` reduces a result to the numbers
that compare policies; `render` turns them into a table, JSON, a PNG or an
HTML page; `cli` wires the `simulate` verb. The drf policy runs the
project's own engine (`slurm_drf.policy.plan`) every interval, as the daemon does.
"""
