"""Nodes: `sinfo --json` (22.05) and `scontrol show nodes --json` (23.02+) -> Node.

A node's partitions, state and TRES (from its `tres` string, filled in
from its CPUs, memory and GRES by `slurm.parse.amounts`); a node listed
once per partition becomes one Node in all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from slurm_drf.errors import SlurmReadError
from slurm_drf.model.types import Node, freeze_tres
from slurm_drf.slurm.parse.amounts import (
    lenient_gres,
    merge_gres,
    parse_gres,
    parse_tres_entries,
    text_field,
    whole_number,
)
from slurm_drf.slurm.parse.envelope import json_records

logger = logging.getLogger(__name__)


def parse_node_state(state: object, flags: object = None) -> str:
    """`mixed` + `["DRAIN"]` (22.05) or `["IDLE", "DRAIN"]` (23.02+) -> `mixed+drain`."""
    parts: list[str]
    if isinstance(state, str):
        parts = state.split("+")
    elif isinstance(state, list) and all(isinstance(s, str) for s in state):
        parts = list(state)
    elif state is None:
        parts = []
    else:
        raise ValueError(f"state: expected a state or a list of states, got {state!r}")
    if isinstance(flags, list):
        parts.extend(str(flag) for flag in flags)
    words = [part.strip().lower() for part in parts if part.strip()]
    return "+".join(dict.fromkeys(words)) or "unknown"


def _node_tres(name: str, tres_text: str, cpus: int | None, memory: int | None, gres_text: str) -> dict[str, int]:
    """Node TRES from its `tres` string, filled in from cpus, memory and GRES."""
    tres, explicit = parse_tres_entries(tres_text)
    if "cpu" not in tres and cpus is not None:
        tres["cpu"] = cpus
    if "mem" not in tres and memory is not None:
        tres["mem"] = memory
    merge_gres(tres, explicit, lenient_gres(parse_gres, gres_text, f"node {name} gres"))
    return tres


def _partition_list(value: object, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [p for p in value.split(",") if p]
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return list(value)
    raise ValueError(f"{key}: expected a list of partitions, got {value!r}")


def parse_node_record(record: object) -> Node:
    """One node record (22.05 `sinfo --json`, 23.02+ `scontrol show nodes --json`)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"expected a node object, got {type(record).__name__}")
    name = text_field(record.get("name"), "name")
    if not name:
        raise ValueError("missing name")
    return Node(
        name=name,
        partitions=tuple(_partition_list(record.get("partitions"), "partitions")),
        state=parse_node_state(record.get("state"), record.get("state_flags")),
        tres=freeze_tres(
            _node_tres(
                name,
                text_field(record.get("tres"), "tres"),
                whole_number(record.get("cpus"), "cpus"),
                whole_number(record.get("real_memory"), "real_memory"),
                text_field(record.get("gres"), "gres"),
            )
        ),
    )


def _nested(record: Mapping[str, Any], path: str) -> object:
    value: object = record
    for part in path.split("/"):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _sinfo_group_nodes(record: object) -> list[Node]:
    """The nodes of one 23.02+ `sinfo --json` record (a group of alike nodes)."""
    if not isinstance(record, Mapping):
        raise TypeError(f"expected an sinfo object, got {type(record).__name__}")
    names = _nested(record, "nodes/nodes")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"nodes.nodes: expected a list of node names, got {names!r}")
    partition = _nested(record, "partition/name")
    partitions = (partition.rstrip("*"),) if isinstance(partition, str) and partition else ()
    values: dict[str, int | None] = {}
    for what in ("cpus", "memory"):
        low = whole_number(_nested(record, f"{what}/minimum"), f"{what}.minimum")
        high = whole_number(_nested(record, f"{what}/maximum"), f"{what}.maximum")
        if low is not None and high is not None and low != high:
            logger.warning(
                "sinfo group %s: %s range %d-%d; counting %d per node", ",".join(names), what, low, high, low
            )
        values[what] = low if low is not None else high
    state = parse_node_state(_nested(record, "node/state"))
    gres = _nested(record, "gres/total")
    tres = freeze_tres(
        _node_tres(",".join(names), "", values["cpus"], values["memory"], gres if isinstance(gres, str) else "")
    )
    return [Node(name=name, partitions=partitions, state=state, tres=tres) for name in names]


def _merge_nodes(nodes: Iterable[Node]) -> list[Node]:
    """One Node per name; a node listed once per partition gets them all."""
    merged: dict[str, Node] = {}
    for node in nodes:
        seen = merged.get(node.name)
        if seen is None:
            merged[node.name] = node
        else:
            partitions = tuple(dict.fromkeys([*seen.partitions, *node.partitions]))
            merged[node.name] = Node(seen.name, partitions, seen.state, seen.tres)
    return list(merged.values())


def parse_sinfo_json(data: Mapping[str, Any]) -> list[Node]:
    """Nodes from `sinfo --json` (22.05) or `scontrol show nodes --json` (23.02+).

    Both give one record per node under `nodes`. 23.02+'s `sinfo --json`
    output (node groups under `sinfo`) is read too, one Node per host name.
    A record that cannot be read is skipped with a warning naming it.
    """
    if not isinstance(data, Mapping):
        raise SlurmReadError(f"node list: expected a JSON object, got {type(data).__name__}")
    nodes: list[Node] = []
    if "nodes" in data or "sinfo" not in data:
        for record in json_records(data, "nodes", "node list"):
            try:
                nodes.append(parse_node_record(record))
            except Exception as error:  # one bad record must not stop the rest
                label = record.get("name", "?") if isinstance(record, Mapping) else "?"
                logger.warning("node %s skipped: %s", label, error)
        return _merge_nodes(nodes)
    for index, record in enumerate(json_records(data, "sinfo", "sinfo --json")):
        try:
            nodes.extend(_sinfo_group_nodes(record))
        except Exception as error:  # one bad record must not stop the rest
            logger.warning("sinfo record %d skipped: %s", index, error)
    return _merge_nodes(nodes)
