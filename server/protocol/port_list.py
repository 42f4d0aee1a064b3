"""The `portList` of the v1 and draft dialects: labels with a count and an optional first port."""

from __future__ import annotations

import re
from typing import Any

from server.protocol.fields import Fields
from server.protocol.issues import join
from server.protocol.model import PortRequest
from server.protocol.rules import RolePaths, check_unique

LABEL = re.compile(r"[A-Za-z0-9._~]+")
LABEL_RULE = "must match ^[A-Za-z0-9._~]+$"

PORT_KEYS = ("label", "beginAt", "portNumber")  # an entry of a `portList`


def read_port_list(
    obj: dict[str, Any],
    path: str,
    f: Fields,
    paths: RolePaths,
    *,
    count_required: bool,
    numeric_strings: bool = False,
) -> list[PortRequest] | None:
    """Read `obj.portList`, recording each label's paths for the shared rules."""
    raw = obj.get("portList")
    if raw is None:
        return []
    where = join(path, "portList")
    items = f.as_list(raw, where)
    if items is None:
        return None
    out: list[PortRequest] = []
    labels: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        item_path = join(where, i)
        entry = f.as_mapping(item, item_path)
        if entry is None:
            continue
        f.known_keys(entry, item_path, PORT_KEYS)
        f.required(entry, item_path, ("label", "portNumber") if count_required else ("label",))
        label = f.string(entry, "label", item_path, pattern=LABEL, rule=LABEL_RULE)
        begin = f.integer(entry, "beginAt", item_path, default=0, numeric_strings=numeric_strings)
        count = f.integer(
            entry, "portNumber", item_path, default=1, numeric_strings=numeric_strings
        )
        if label is None or begin is None or count is None:
            continue
        labels.append((label, join(item_path, "label")))
        if label in paths.ports:
            continue  # a duplicate label: reported below, and not requested twice
        paths.ports[label] = join(item_path, "portNumber")
        paths.port_labels[label] = join(item_path, "label")
        paths.begin_at[label] = join(item_path, "beginAt")
        out.append(PortRequest(label=label, count=count, begin_at=begin))
    check_unique(labels, f.issues, "port label")
    return out
