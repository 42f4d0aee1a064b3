"""Using an item: the job config a user gets, ready to submit.

A template with its parameters filled in, or an empty job that uses a component by reference
or runs in a docker image (docs/dialects.md, References).
"""

from __future__ import annotations

import json
import re
from typing import Any

from server.marketplace.items import IssuesFound, ItemDocument
from server.protocol import Issue, parse_job
from server.protocol.loader import load_document
from server.protocol.model import Dialect, PrerequisiteType
from server.protocol.yaml_out import dump_yaml

DEFAULT_IMAGE = "ubuntu:22.04"
ROLE = "taskrole"
IMAGE_NAME = "docker_image_0"
_RESOURCES = {"cpu": 1, "memoryMB": 1024, "gpu": 0}
# The role field that puts a component with URIs in place under /work/<name>/.
_ROLE_FIELDS = {
    PrerequisiteType.DATA: "data",
    PrerequisiteType.SCRIPT: "script",
    PrerequisiteType.OUTPUT: "output",
}


def item_reference(item_id: str, name: str, version: str | None) -> str:
    """How a job names the item: by ID (its latest version), or by name when a version is
    pinned."""
    if version is not None:
        return f"marketplace://name/{name}@{version}"
    return f"marketplace://prerequisites/itemId/{item_id}"


def template_config(document: ItemDocument, parameters: dict[str, Any]) -> str:
    """The template with `parameters` filled in; raises IssuesFound for a parameter it does not
    declare or values that make it invalid."""
    spec = document.spec
    assert spec is not None
    if not parameters:
        return document.content
    declared = list(spec.parameters)
    unknown = [name for name in parameters if name not in declared]
    if unknown:
        known = ", ".join(declared) if declared else "it declares none"
        raise IssuesFound(
            [
                Issue.at(
                    ["parameters", name],
                    "unknown-parameter",
                    f"template {document.name!r} has no parameter {name!r} (its parameters: "
                    f"{known})",
                )
                for name in unknown
            ]
        )
    loaded = load_document(document.content)
    doc = loaded.data
    if spec.dialect is Dialect.V1:
        doc["jobEnvs"] = {**(doc.get("jobEnvs") or {}), **parameters}
    else:
        target = doc
        if (
            spec.dialect is Dialect.DRAFT
            and isinstance(doc.get("job"), dict)
            and "tasks" not in doc
        ):
            target = doc["job"]
        target["parameters"] = {**(target.get("parameters") or {}), **parameters}
    if loaded.format == "json":
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    else:
        text = dump_yaml(doc)
    checked = parse_job(text)
    if checked.errors:
        raise IssuesFound([issue.within("parameters") for issue in checked.errors])
    return text


def component_job(
    document: ItemDocument,
    *,
    item_id: str,
    version: str | None,
    variables: dict[str, Any],
    image: str | None,
) -> str:
    """An empty v2 job that uses the component; a template variable not given takes its
    declared default; raises IssuesFound for one without either, or one it does not declare."""
    component = document.component
    assert component is not None
    if component.type is PrerequisiteType.DOCKERIMAGE:
        return _image_job(document, variables, image)
    wanted = list(component.template_variables)
    defaults = {k: v for k, v in component.variable_defaults.items() if k in wanted}
    variables = {**defaults, **variables}
    problems = [
        Issue.at(
            ["parameters", name],
            "missing-variable",
            f"item {document.name!r} needs a value for its template variable {name!r}: give it "
            "in parameters (the web UI's Use form, or paigraph market use --param "
            f"{name}=VALUE)",
        )
        for name in wanted
        if name not in variables
    ]
    problems += [
        Issue.at(
            ["parameters", name],
            "unknown-parameter",
            f"item {document.name!r} has no template variable {name!r} (its variables: "
            f"{', '.join(wanted) if wanted else 'none'})",
        )
        for name in variables
        if name not in wanted
    ]
    if problems:
        raise IssuesFound(problems)
    reference = item_reference(item_id, document.name, version)
    doc = _empty_job(document.name, image)
    role = doc["taskRoles"][ROLE]
    if wanted:  # as seed 004 writes it: the item by name, its variables given
        local = _safe_name(document.name)
        by_name = f"marketplace://name/{document.name}" + (f"@{version}" if version else "")
        role["prerequisites"] = [local]
        doc["extras"] = {
            "reference_prerequisites": [
                {
                    "name": local,
                    "require": [{"name": by_name, "template_variables": dict(variables)}],
                }
            ]
        }
        return dump_yaml(doc)
    field = _ROLE_FIELDS.get(component.type) if component.uri else None
    if field is not None:  # put in place under the work directory, as the role's data, ...
        role[field] = reference
        role["commands"] = [f"ls -la /work/{component.name}"]
    acts = component.plugin or component.callbacks or component.require
    if field is None or acts or component.require_storages:
        role["prerequisites"] = [reference]  # its plugin runs, its requirements come along
    return dump_yaml(doc)


def _image_job(document: ItemDocument, variables: dict[str, Any], image: str | None) -> str:
    component = document.component
    assert component is not None
    problems = []
    if image is not None:
        problems.append(
            Issue.at(
                ["dockerImage"],
                "not-applicable",
                f"item {document.name!r} is a docker image itself: the job runs in it",
            )
        )
    problems += [
        Issue.at(
            ["parameters", name],
            "unknown-parameter",
            f"docker image {document.name!r} takes no parameters",
        )
        for name in variables
    ]
    if problems:
        raise IssuesFound(problems)
    doc = _empty_job(document.name, component.uri[0])
    image_entry = doc["prerequisites"][0]
    if component.auth is not None:
        image_entry["auth"] = component.auth.model_dump(exclude_none=True)
    return dump_yaml(doc)


def _empty_job(item_name: str, image: str | None) -> dict[str, Any]:
    return {
        "protocolVersion": 2,
        "name": f"{_safe_name(item_name)}_job",
        "type": "job",
        "prerequisites": [
            {"name": IMAGE_NAME, "type": "dockerimage", "uri": image or DEFAULT_IMAGE}
        ],
        "taskRoles": {
            ROLE: {
                "instances": 1,
                "dockerImage": IMAGE_NAME,
                "resourcePerInstance": dict(_RESOURCES),
                "commands": [f"echo '{_safe_name(item_name)} is in place: put your commands here'"],
            }
        },
        "defaults": {"virtualCluster": "default"},
    }


def _safe_name(name: str) -> str:
    """The item name as a v2 name (letters, digits, _ and -)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "item"
