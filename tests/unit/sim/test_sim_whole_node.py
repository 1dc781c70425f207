"""The whole-node scenario (docs/evaluation.md, *Whole-node jobs*): what it is made of, and where
drf's idle GPUs are, measured on the same jobs beside multifactor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_drf.sim.compare import PolicySettings, run_comparison
from slurm_drf.sim.options import SimOptions
from slurm_drf.sim.run_metrics import compute_utilisation, contended_utilisation
from slurm_drf.sim.scenarios import WHOLE_NODE_SMALL, build_scenario


def test_the_scenario_is_small_gpu_accounts_and_one_of_whole_nodes() -> None:
    workload = build_scenario("whole-node", 2, nodes=6, jobs=400)
    node = workload.node_type
    whole = [j for j in workload.jobs if j.account == "wholenode"]
    small = [j for j in workload.jobs if j.account != "wholenode"]
    assert len({j.account for j in small}) == WHOLE_NODE_SMALL
    assert whole and all((j.cpu, j.mem, j.gpu) == (node.cpu, node.mem, node.gpu) for j in whole)
    assert all(j.gpu == 1 and j.cpu * 8 == node.cpu for j in small)
    window = max(j.submit for j in workload.jobs)
    assert min(j.submit for j in whole) >= 0.19 * window


def test_contended_utilisation_counts_only_samples_where_two_accounts_wait() -> None:
    comparison = run_comparison(build_scenario("whole-node", 1, nodes=4, jobs=120), ["drf"], SimOptions())
    result = comparison.results[0]
    count = len(result.sample_time)
    pending = np.zeros((count, len(result.accounts)), dtype=np.int64)
    pending[: count // 2, :2] = 1  # two accounts wait in the first half, one in the second
    pending[count // 2 :, 0] = 1
    used = np.zeros((count, 3), dtype=np.int64)
    used[: count // 2, 2] = result.capacity[2]  # GPUs full in the first half, idle in the second
    shaped = replace(result, sample_pending=pending, sample_used=used)
    assert contended_utilisation(shaped)["gres/gpu"] == pytest.approx(1.0)
    assert compute_utilisation(shaped)[0]["gres/gpu"] == pytest.approx((count // 2) / count)


def test_drfs_idle_gpus_are_the_workloads_end_not_the_contended_stretch() -> None:
    """On the same jobs under Slurm-like backfill: while two or more accounts wait, drf keeps the GPUs
    within 2 points of multifactor; the larger gap while any work waits comes from the samples where
    only whole-node jobs are left."""
    workload = build_scenario("whole-node", 1, nodes=4, jobs=200)
    options = SimOptions(backfill="slurm", backfill_depth=20)
    comparison = run_comparison(workload, ["multifactor", "drf"], options, PolicySettings(engine="fast"))
    multifactor, drf = comparison.results
    contended = [contended_utilisation(r)["gres/gpu"] for r in (multifactor, drf)]
    waiting = [m.utilisation["gres/gpu"] for m in comparison.metrics]
    assert contended[1] >= contended[0] - 0.02
    assert waiting[0] - waiting[1] > contended[0] - contended[1]
    whole = drf.accounts.index("wholenode")
    only_whole = (np.delete(drf.sample_pending, whole, axis=1).sum(axis=1) == 0) & (drf.sample_pending[:, whole] > 0)
    assert only_whole.any()
    assert float((drf.capacity[2] - drf.sample_used[only_whole, 2]).mean()) > 4  # half a node idle or more
