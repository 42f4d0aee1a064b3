"""Names the draft and v1 dialects allow but protocol v2 does not, and their v2 spelling.

A draft job or prerequisite may be called `train.v2` or `~`, a v1 job `resnet.50`; protocol v2
names allow only letters, digits, `_` and `-`. Writing such a job as v2 uses `v2_name`, a
deterministic spelling that v2 accepts (the disallowed characters become `-`, and a short hash
of the original keeps two names that differ only there apart), and keeps the original under
`extras.paigraph` so that reading the v2 document back gives the job its own name again.
"""

from __future__ import annotations

import hashlib
import re

from server.protocol.model import TaskRole

V2_NAME = re.compile(r"[a-zA-Z0-9_-]+")
V2_NAME_RULE = "must match ^[a-zA-Z0-9_-]+$ (letters, digits, _ and -)"
MAX_LENGTH = 255
_HASH_LENGTH = 8
_NOT_V2 = re.compile(r"[^a-zA-Z0-9_-]")


def is_v2_name(name: str) -> bool:
    return bool(V2_NAME.fullmatch(name)) and len(name) <= MAX_LENGTH


def v2_name(name: str) -> str:
    """`name` itself when protocol v2 accepts it; otherwise the same name with every other
    character replaced by `-`, followed by `-` and 8 hex digits of the original's SHA-256."""
    if is_v2_name(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LENGTH]
    stem = _NOT_V2.sub("-", name)[: MAX_LENGTH - _HASH_LENGTH - 1]
    return f"{stem}-{digest}"


def original_name(written: str, recorded: object) -> str | None:
    """The original name `recorded` under extras.paigraph for the v2 name `written`, when it
    is one whose v2 spelling is `written` (an edited name no longer matches and is kept)."""
    if isinstance(recorded, str) and recorded != written and v2_name(recorded) == written:
        return recorded
    return None


def rename_references(role: TaskRole, renamed: dict[str, str]) -> TaskRole:
    """`role` naming its prerequisites by the names `renamed` maps them to."""

    def one(name: str | None) -> str | None:
        return renamed.get(name, name) if name is not None else None

    return role.model_copy(
        update={
            "docker_image": one(role.docker_image),
            "data": one(role.data),
            "script": one(role.script),
            "output": one(role.output),
            "prerequisites": [renamed.get(n, n) for n in role.prerequisites],
        }
    )
