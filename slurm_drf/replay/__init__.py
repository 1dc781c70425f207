"""A workload replayed through a real Slurm in compressed time (`slurm-drf replay`).

Sits beside the service, above the simulator and the cycle: `trace`
turns a simulator workload into timed `sbatch` submissions (pure),
`users` who submits each of them and the associations that needs (pure),
`arms` says what each arm runs (Slurm alone, or the daemon with a given
config), `cluster` is the replay's door to Slurm (sbatch, scancel, sacct,
sacctmgr, sdiag), `run` plays one arm and samples the cluster, `result`
is the result file and its conversion to the simulator's `SimResult`, so
that one metrics module (`sim.run_metrics`) measures both.
"""
