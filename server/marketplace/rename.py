"""Publishing content under another name than the one it gives itself.

An item's name is its content's name, so a new name is written into the content (where its
dialect keeps it: `name`, `jobName` in v1 JSON, `job.name` in a draft job with a `job`
section) and the content is read again. The text is written out anew, as using a template
with parameters does: YAML stays YAML and JSON stays JSON, comments are not kept.
"""

from __future__ import annotations

import json
from typing import Any

from server.marketplace.items import IssuesFound, ItemDocument, read_item
from server.protocol import Issue
from server.protocol.loader import load_document
from server.protocol.model import Dialect
from server.protocol.yaml_out import dump_yaml


def renamed(document: ItemDocument, name: str) -> ItemDocument:
    """The document named `name`; raises IssuesFound at `name` when that name breaks the rules
    of the content's kind."""
    loaded = load_document(document.content)
    doc: dict[str, Any] = loaded.data
    key, target = "name", doc
    if document.spec is not None and document.spec.dialect is Dialect.V1:
        key = "jobName"
    elif isinstance(doc.get("job"), dict) and "tasks" not in doc:
        target = doc["job"]
    target[key] = name
    if loaded.format == "json":
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    else:
        text = dump_yaml(doc)
    try:
        return read_item(text)
    except IssuesFound as exc:
        raise IssuesFound([Issue.at(["name"], p.code, p.message) for p in exc.issues]) from None
