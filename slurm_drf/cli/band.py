"""What the exact band holds for a site's actual weights: `check-config`'s and the plan's summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from slurm_drf.config.settings import HORIZON_MARGIN, Config
from slurm_drf.errors import DrfError
from slurm_drf.policy.label_space import label_space, priority_weight_sum
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.scontrol import parse_priority_weights, parse_scheduler_parameters
from slurm_drf.slurm.reach import refused

SCONTROL_TIMEOUT = 10.0
# `slurm.cli_source.build_scontrol_config_argv()` (a test holds them equal): that module
# brings the whole reader with it, numpy and the codec, which check-config does not need.
SCONTROL_CONFIG_ARGV: Final = ("scontrol", "show", "config")


def band_lines(config: Config, weights: Mapping[str, int], scheduler: Mapping[str, int]) -> list[str]:
    """How many jobs per pool get exact values, how far apart, and what happens past that."""
    space = label_space(config, weights, scheduler)
    if config.horizon is not None:
        source = "horizon in the config"
    else:
        depth = {k: scheduler[k] for k in ("bf_max_job_test", "default_queue_depth") if k in scheduler}
        source = f"auto: {HORIZON_MARGIN} x the deeper of Slurm's look-ahead" + (
            f" ({', '.join(f'{k}={v}' for k, v in depth.items())})" if depth else " (Slurm's defaults 500 and 100)"
        )
    total = priority_weight_sum(weights)
    if config.mode == "priority":
        apart = "neighbours 1 apart (priority mode: Slurm adds no other factor)"
    elif config.weighting == "factor":
        apart = (
            f"weighting factor: DRF adds 1 to {config.factor_weight}, neighbours 1 apart; "
            f"Slurm's other factors (sum {total}) can outrank it"
        )
    else:
        apart = f"weighting strict: neighbours {space.gap} apart (1 + PriorityWeight* sum {total})"
    lines = [f"exact band: the first {space.horizon} pending jobs of each pool ({source}); {apart}"]
    if space.separable < space.horizon:
        lines.append(
            f"  the value range holds only {space.separable} jobs that far apart: the band stops there, "
            "and the jobs after it are coarse, where Slurm's other factors can reorder them"
            + ("; weighting: factor keeps a longer band" if config.weighting == "strict" else "")
        )
    else:
        lines.append(
            f"  the value range holds {space.separable} jobs that far apart; a pool with more pending jobs "
            "than that gets one value for all of its coarse band, ordered there by Slurm's other factors"
        )
    return lines


def read_slurm_config() -> str | DrfError:
    """`scontrol show config`, or why it could not be read (check-config reads it once, for every check);
    at once where every controller slurm.conf names refuses a connection (scontrol would retry for 10 s)."""
    down = refused()
    if down is not None:
        return DrfError(f"{down}; is slurmctld running?")
    try:
        return run_command(SCONTROL_CONFIG_ARGV, SCONTROL_TIMEOUT)
    except DrfError as error:
        return error


def site_weights(
    snapshot_path: str | None, config_text: str | DrfError | None = None
) -> tuple[Mapping[str, int], Mapping[str, int]] | str:
    """Slurm's PriorityWeight* and SchedulerParameters, from a snapshot or `scontrol show config`
    (`config_text`, read here when not given); a one-line reason when neither can be read."""
    if snapshot_path is not None:
        from slurm_drf.model.snapshot_file import SnapshotFileSource  # noqa: PLC0415  (a snapshot is rarely given)

        snapshot = SnapshotFileSource(snapshot_path).fetch_snapshot()
        return snapshot.priority_weights, snapshot.scheduler_parameters
    text = read_slurm_config() if config_text is None else config_text
    if isinstance(text, DrfError):
        return f"Slurm's weights unknown ({text}); pass --snapshot FILE to use a saved snapshot's"
    return parse_priority_weights(text), parse_scheduler_parameters(text)
