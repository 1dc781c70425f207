"""Which ClusterSource and Writer a config asks for (`backend: auto | cli | pyslurm`)."""

from __future__ import annotations

import logging

from slurm_drf.config.settings import Config
from slurm_drf.cycle.run import Writer
from slurm_drf.errors import SlurmReadError
from slurm_drf.slurm.cli_source import CliSource
from slurm_drf.slurm.pyslurm_source import PyslurmSource, pyslurm_usable
from slurm_drf.slurm.pyslurm_write import PyslurmWriter
from slurm_drf.slurm.source import ClusterSource
from slurm_drf.slurm.write import ScontrolWriter

logger = logging.getLogger(__name__)


def make_source(config: Config) -> ClusterSource:
    """The ClusterSource the config asks for (`backend: auto | cli | pyslurm`), each Slurm
    read command bounded by `slurm_timeout`."""
    if config.backend in ("auto", "pyslurm"):
        usable, why = pyslurm_usable()
        if usable:
            logger.info("backend: pyslurm")
            return PyslurmSource(timeout=config.slurm_timeout)
        if config.backend == "pyslurm":
            raise SlurmReadError(f"backend pyslurm: {why}")
        logger.debug("backend: cli (pyslurm not usable: %s)", why)
    return CliSource(timeout=config.slurm_timeout)


def make_writer(source: ClusterSource) -> Writer:
    """The writer that goes with the source: pyslurm's when pyslurm reads."""
    if isinstance(source, PyslurmSource):
        return PyslurmWriter()
    return ScontrolWriter()
