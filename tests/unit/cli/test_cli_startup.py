"""What a verb imports before it works (issue 40): `slurm-drf --help` and `check-config` start without
numpy, the planner, the daemon's scheduler, the metrics or the simulator.

The imports are read in a new interpreter (this one has them all); the
help lines that stand for the verbs not asked for are their modules' own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_drf.cli import main as cli_main
from slurm_drf.cli.band import SCONTROL_CONFIG_ARGV
from slurm_drf.slurm.cli_source import build_scontrol_config_argv

CHECKOUT = Path(__file__).resolve().parents[3]

# Third-party packages and our modules that a verb's start may not pay for.
HEAVY = ("numpy", "jsonschema", "prometheus_client", "apscheduler", "matplotlib", "pyslurm", "orjson", "sqlite3")
OURS = ("slurm_drf.policy", "slurm_drf.model.codec", "slurm_drf.service", "slurm_drf.sim", "slurm_drf.replay",
        "slurm_drf.cycle", "slurm_drf.trail", "slurm_drf.slurm.cli_source")  # fmt: skip

_RUN = """
import contextlib, io, json, sys
sys.argv = ["slurm-drf", *json.loads(sys.argv[1])]
if "check-config" in sys.argv:
    import slurm_drf.cli.band as band
    from slurm_drf.errors import SlurmError

    def no_scontrol(argv, timeout, **kwargs):
        raise SlurmError("no scontrol in this test")

    band.run_command = no_scontrol
from slurm_drf.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    code = main(sys.argv[1:])
print(json.dumps({"modules": sorted(sys.modules), "out": out.getvalue()}))
"""


def _imported(*argv: str) -> tuple[list[str], str]:
    """The modules a new interpreter has after `slurm-drf ARGV`, and what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
        cwd=CHECKOUT,
        env={"PYTHONPATH": str(CHECKOUT), "PATH": "/usr/bin:/bin"},
    )
    found = json.loads(done.stdout.splitlines()[-1])
    return found["modules"], found["out"]


def _heavy(modules: list[str], allowed: frozenset[str] = frozenset()) -> list[str]:
    return [m for m in modules if (m.split(".")[0] in HEAVY or m.startswith(OURS)) and m not in allowed]


def test_help_imports_nothing_heavy() -> None:
    modules, out = _imported("--help")
    assert "daemon" in out and "simulate" in out and "job-submit" in out
    assert _heavy(modules) == []
    assert not [m for m in modules if m.split(".")[0] == "yaml"]


def test_check_config_imports_the_config_reader_and_the_label_space_only(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: nice\naccounts:\n  physics: {weight: 2}\n")
    config.chmod(0o600)
    modules, out = _imported("check-config", str(config))
    assert "OK (mode nice, 1 weighted account(s)" in out and "Slurm's weights unknown" in out
    assert _heavy(modules, allowed=frozenset({"slurm_drf.policy", "slurm_drf.policy.label_space"})) == []


@pytest.mark.parametrize("verb", sorted({v for _, _, helps in cli_main._VERB_MODULES for v in helps}))
def test_the_help_line_of_a_verb_not_asked_for_is_its_modules(verb: str) -> None:
    """With the verb asked for, its module adds its parser; the top help must read the same."""
    assert cli_main.build_parser([verb]).format_help() == cli_main.build_parser([]).format_help()


def test_check_config_asks_scontrol_what_the_reader_asks() -> None:
    assert list(SCONTROL_CONFIG_ARGV) == build_scontrol_config_argv()


def test_a_plan_without_guarantees_imports_neither_them_nor_openssl(tmp_path: Path) -> None:
    """policy.guarantees is imported for a pool with guarantees or limits (and then plans as before);
    the tie rule's BLAKE2 is hashlib's own, without the OpenSSL bindings `import hashlib` loads."""
    snapshot = CHECKOUT / "tests" / "fixtures" / "report" / "snapshot.json"
    modules, out = _imported("plan", "--snapshot", str(snapshot), "--config", "/dev/null")
    assert "pool default" in out and "slurm_drf.policy.engine.order" in modules
    assert not {"slurm_drf.policy.guarantees", "hashlib", "_hashlib", "secrets"} & set(modules)
    config = tmp_path / "config.yaml"
    config.write_text("accounts:\n  physics: {limit: 10%}\n")
    config.chmod(0o600)
    modules, out = _imported("plan", "--snapshot", str(snapshot), "--config", str(config))
    assert "pool default" in out and "slurm_drf.policy.guarantees" in modules


def _verb_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (verbs,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return dict(verbs.choices)


def test_the_full_parser_has_every_verbs_options() -> None:
    """build_full_parser, which the Debian package's man page and bash completion are made from
    (debian/rules), gives each verb the options it has when asked for alone."""
    full = _verb_parsers(cli_main.build_full_parser())
    for verb in sorted({v for _, _, helps in cli_main._VERB_MODULES for v in helps}):
        alone = _verb_parsers(cli_main.build_parser([verb]))[verb]
        assert full[verb].format_help() == alone.format_help(), verb
    assert "--scenario" in full["simulate"].format_help()
    assert full.keys() == _verb_parsers(cli_main.build_parser([])).keys()
