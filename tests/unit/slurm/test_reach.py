"""`slurm.reach`: telling at once that no slurmctld listens, and nothing else (issue 37: check-config waited 9 s)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurm_drf.cli.main import main
from slurm_drf.slurm.reach import DEFAULT_PORT, controllers, refused


@pytest.mark.parametrize(
    ("text", "hosts", "port"),
    [
        ("SlurmctldHost=head\n", ["head"], DEFAULT_PORT),
        ("SlurmctldHost=head(10.0.0.1)\nSlurmctldHost=backup\nSlurmctldPort=6820-6823\n", ["10.0.0.1", "backup"], 6820),
        ("slurmctldhost = head # a comment\nslurmctldport=7000\n", ["head"], 7000),
        ("ControlMachine=old\nControlAddr=10.0.0.9\n", ["10.0.0.9"], DEFAULT_PORT),
        ("#SlurmctldHost=commented\nClusterName=c\n", [], DEFAULT_PORT),
        ("SlurmctldHost=head\nSlurmctldPort=99999\n", ["head"], DEFAULT_PORT),
    ],
)
def test_controllers_and_port_from_slurm_conf(text: str, hosts: list[str], port: int) -> None:
    assert controllers(text) == (hosts, port)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_every_controller_refusing_is_told_with_where(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    port = _closed_port()
    conf.write_text(f"SlurmctldHost=here(127.0.0.1)\nSlurmctldPort={port}\n")
    assert refused(str(conf)) == f"slurmctld refuses connections at 127.0.0.1:{port} (from {conf})"


def test_a_listening_controller_is_left_to_slurm(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        conf = tmp_path / "slurm.conf"
        # The first refuses, the second (a backup) listens: Slurm is asked.
        conf.write_text(f"SlurmctldHost=a(127.0.0.1)\nSlurmctldHost=b(127.0.0.1)\nSlurmctldPort={port}\n")
        assert refused(str(conf)) is None


@pytest.mark.parametrize("text", [None, "ClusterName=configless\n", "SlurmctldHost=no-such-host.invalid\n"])
def test_what_cannot_be_told_quickly_is_left_to_slurm(tmp_path: Path, text: str | None) -> None:
    conf = tmp_path / "slurm.conf"
    if text is not None:
        conf.write_text(text)
    assert refused(str(conf)) is None


def test_check_config_says_at_once_that_slurmctld_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"SlurmctldHost=here(127.0.0.1)\nSlurmctldPort={_closed_port()}\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    config = tmp_path / "config.yaml"
    config.write_text("mode: nice\n")
    config.chmod(0o600)
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "Slurm's weights unknown (slurmctld refuses connections at 127.0.0.1:" in out
