"""`slurm-drf job-submit`: install the job_submit/lua script, and check that placement at submission works."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from slurm_drf.config.load import resolve_config
from slurm_drf.errors import SlurmError
from slurm_drf.service.job_submit import (
    Finding,
    install_module,
    install_script,
    memory_finding,
    memory_settings,
    plugin_finding,
    script_finding,
    table_finding,
)
from slurm_drf.slurm.cli_source import build_scontrol_config_argv
from slurm_drf.slurm.execute import run_command
from slurm_drf.slurm.parse.scontrol import parse_scontrol_config
from slurm_drf.trail.placement import default_path

SCONTROL_TIMEOUT = 30.0


def cmd_install(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if args.module_only:
        written = install_module(directory)
    else:
        table = args.table or default_path(resolve_config(args.config, os.environ))
        try:
            memory = memory_settings(parse_scontrol_config(run_command(build_scontrol_config_argv(), SCONTROL_TIMEOUT)))
        except SlurmError as error:
            memory = {}
            print(f"warning: scontrol show config: {error}; slurm.conf's global DefMemPerCPU is not written in")
        written = install_script(directory, table, memory, force=args.force)
    for path in written:
        print(f"wrote {path}")
    print("then: JobSubmitPlugins=lua in slurm.conf (if it is not there), and `scontrol reconfigure`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    config = resolve_config(args.config, os.environ)
    try:
        text = run_command(build_scontrol_config_argv(), SCONTROL_TIMEOUT)
    except SlurmError as error:
        print(f"not ok: scontrol show config: {error}")
        return 1
    slurm_conf = parse_scontrol_config(text).get("SLURM_CONF", "/etc/slurm/slurm.conf")
    directory = Path(args.directory) if args.directory else Path(slurm_conf).parent
    findings = [plugin_finding(text), script_finding(directory)]
    if findings[-1].ok:
        findings.append(memory_finding(directory, memory_settings(parse_scontrol_config(text))))
    if config.placement is None:
        findings.append(Finding(False, "the config has placement: null, so the daemon publishes no table"))
    else:
        findings.append(table_finding(Path(args.table or default_path(config))))
    for finding in findings:
        print(f"{'ok' if finding.ok else 'not ok'}: {finding.text}")
    return 0 if all(f.ok for f in findings) else 1


def add_job_submit_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "job-submit", help="the job_submit/lua script that places jobs at submission: install it, check it"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = actions.add_parser("install", help="write job_submit.lua and slurm_drf_submit.lua into DIRECTORY")
    install.add_argument("directory", metavar="DIRECTORY", help="slurm.conf's directory (where slurmctld looks)")
    install.add_argument("--table", metavar="PATH", help="the placement table (default: the config's)")
    install.add_argument("--config", metavar="FILE", help="config YAML (for placement.path and state_dir)")
    install.add_argument("--force", action="store_true", help="replace a job_submit.lua of the site's own")
    install.add_argument(
        "--module-only", action="store_true", help="only the module, for a site's own job_submit.lua that calls it"
    )
    install.set_defaults(func=cmd_install)
    status = actions.add_parser("status", help="does slurmctld load it, is the script there, is the table fresh")
    status.add_argument("--config", metavar="FILE", help="config YAML (for placement.path and state_dir)")
    status.add_argument("--table", metavar="PATH", help="the placement table (default: the config's)")
    status.add_argument("--directory", metavar="DIR", help="where job_submit.lua is (default: slurm.conf's)")
    status.set_defaults(func=cmd_status)
