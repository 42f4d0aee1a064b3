"""Items for the marketplace tests, built as data so each test changes only what it is about,
and the corpus files the protocol engine accepts as templates or components."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from server.marketplace.items import read_item
from server.protocol import Kind, parse_document
from tests.corpus import CORPUS
from tests.simulated import IMAGE


def template(
    name: str = "hello",
    *,
    version: str | None = None,
    parameters: dict[str, Any] | None = None,
    commands: list[str] | None = None,
    description: str | None = None,
    **top: Any,
) -> str:
    """A one-role v2 job template on the local busybox image."""
    doc: dict[str, Any] = {"protocolVersion": 2, "name": name, "type": "job"}
    if version is not None:
        doc["version"] = version
    if description is not None:
        doc["description"] = description
    if parameters is not None:
        doc["parameters"] = parameters
    doc["prerequisites"] = [{"name": "bb", "type": "dockerimage", "uri": IMAGE}]
    doc["taskRoles"] = {
        "main": {
            "instances": 1,
            "dockerImage": "bb",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
            "commands": commands or ["echo hello"],
        }
    }
    doc.update(top)
    return yaml.safe_dump(doc, sort_keys=False)


def data_item(
    name: str = "mnist",
    *,
    commands: list[str] | None = None,
    variables: list[str] | None = None,
    version: str | None = None,
    description: str | None = None,
    **extra: Any,
) -> str:
    """A seed-004 dataset: a cmd plugin prerequisite whose taskStarts callback fetches data."""
    doc: dict[str, Any] = {"name": name, "type": "data"}
    if version is not None:
        doc["version"] = version
    if description is not None:
        doc["description"] = description
    doc["plugin"] = "com.microsoft.pai.runtimeplugin.cmd"
    doc["callbacks"] = [
        {"event": "taskStarts", "commands": commands or ["mkdir -p /dataset/" + name]}
    ]
    if variables:
        doc["template_variables"] = [{"name": v} for v in variables]
    doc.update(extra)
    return yaml.safe_dump(doc, sort_keys=False)


def image_item(name: str = "busybox", uri: str = IMAGE) -> str:
    return yaml.safe_dump({"name": name, "type": "dockerimage", "uri": uri}, sort_keys=False)


@dataclass(frozen=True)
class CorpusItem:
    path: Path
    name: str
    kind: str  # "job_template" or the component's type
    version: str | None
    stored: str  # the text the marketplace keeps: secrets declared without their values


def accepted_corpus_items() -> list[CorpusItem]:
    """Every YAML / JSON file of the corpus that the protocol engine accepts, by path."""
    found = []
    for path in sorted(CORPUS.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        result = parse_document(text)
        if not result.ok:
            continue
        if result.kind is Kind.COMPONENT:
            assert result.component is not None
            c = result.component
            version = str(c.version) if c.version is not None else None
            found.append(CorpusItem(path, c.name, c.type.value, version, read_item(text).content))
        else:
            assert result.spec is not None
            s = result.spec
            version = str(s.version) if s.version is not None else None
            stored = read_item(text).content
            found.append(CorpusItem(path, s.name, "job_template", version, stored))
    return found


def corpus_files() -> list[Path]:
    return sorted(
        p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json")
    )
