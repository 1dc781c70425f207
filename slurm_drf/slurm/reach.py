"""Is slurmctld there at all? A quick look before a Slurm command that would wait for it.

With no slurmctld listening, `scontrol show config` retries its
controllers for MessageTimeout (10 s by default) before it gives up;
`check-config` should answer at once instead. `refused` reads the
controllers and port from slurm.conf (`$SLURM_CONF`, else Debian's
/etc/slurm/slurm.conf) and tries a TCP connection to each: only when every
one is refused does it say so. Anything else (no slurm.conf, a configless
node, a name that does not resolve, a slow network) answers None, and the
caller asks Slurm as before: this never turns a live Slurm into a dead one.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Final

DEFAULT_CONF: Final = "/etc/slurm/slurm.conf"
DEFAULT_PORT: Final = 6817
# How long one connection may take: a controller on the site's network answers far sooner.
CONNECT_TIMEOUT: Final = 0.3
_LINE: Final = re.compile(r"^\s*(SlurmctldHost|ControlMachine|ControlAddr|SlurmctldPort)\s*=\s*(\S+)", re.IGNORECASE)
# `SlurmctldHost=name(address)`, `SlurmctldHost=name`.
_HOST: Final = re.compile(r"^([^()]+)(?:\(([^()]+)\))?$")


def controllers(text: str) -> tuple[list[str], int]:
    """The controllers' addresses (an address in parentheses over the name) and the first port of
    slurm.conf's text; an empty list where it names none."""
    hosts: list[str] = []
    port = DEFAULT_PORT
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        key, value = found.group(1).lower(), found.group(2)
        if key == "slurmctldport":
            first = value.split("-", 1)[0]
            port = int(first) if first.isdigit() and 0 < int(first) < 65536 else port
        elif key == "controladdr":
            hosts[-1:] = [value]  # the address of the ControlMachine before it
        else:
            named = _HOST.match(value)
            if named is not None:
                hosts.append(named.group(2) or named.group(1))
    return hosts, port


def refused(conf: str | None = None) -> str | None:
    """ "slurmctld refuses connections at HOST:PORT" when every controller slurm.conf names refuses one;
    None when that cannot be told quickly (then ask Slurm)."""
    path = Path(conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF)
    try:
        hosts, port = controllers(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    if not hosts:
        return None
    for host in hosts:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
                return None
        except ConnectionRefusedError:
            continue
        except OSError:  # no answer in time, a name that does not resolve: let Slurm tell
            return None
    return f"slurmctld refuses connections at {', '.join(f'{h}:{port}' for h in hosts)} (from {path})"
