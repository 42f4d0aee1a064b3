"""Every field the three dialects accept, with what paigraph does with it.

HONOURED: it has its effect. WARNED: it is accepted and has none here, and validation says so
with a warning (code `ignored`) at its path. REFUSED: it is an error.

The table is checked against the parsers (their `FIELDS`): a field a parser starts to accept
without a row here fails `test_every_accepted_field_has_an_outcome`. Each WARNED row has a probe
that must produce its warning, and docs/dialects.md shows the same table.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server.protocol import dialect_draft, dialect_v1, dialect_v2, parse_job
from server.protocol.ignored import IGNORED

HONOURED, WARNED, REFUSED = "honoured", "warned", "refused"

_PREREQUISITE = {
    "prerequisites": (HONOURED, "the job's dockerimages, data, scripts, outputs and storages"),
    "prerequisites[].name": (
        HONOURED,
        "the name roles use; data and scripts land at `/work/<name>`",
    ),
    "prerequisites[].type": (HONOURED, "dockerimage, data, script, output or storage"),
    "prerequisites[].uri": (HONOURED, "the image, the files, the repository or the storage"),
    "prerequisites[].protocolVersion": (HONOURED, "must be 2 when given"),
    "prerequisites[].protocol_version": (HONOURED, "the draft's marker; accepted as written"),
    "prerequisites[].version": (HONOURED, "shown with the prerequisite"),
    "prerequisites[].contributor": (HONOURED, "shown with the prerequisite"),
    "prerequisites[].description": (HONOURED, "shown with the prerequisite"),
    "prerequisites[].usage": (HONOURED, "how to use a script (the 2018 template store); kept"),
    "prerequisites[].auth": (
        HONOURED,
        "registry credentials of a dockerimage: a pull secret on Kubernetes, a login before "
        "pulling on the simulator",
    ),
    "prerequisites[].auth.username": (HONOURED, "registry user"),
    "prerequisites[].auth.password": (HONOURED, "registry password, usually `<% $secrets.x %>`"),
    "prerequisites[].auth.registryuri": (HONOURED, "the registry to log in to"),
    "prerequisites[].plugin": (
        HONOURED,
        "`cmd` (also `com.microsoft.pai.runtimeplugin.cmd`) and `pvc_storage` run; any other "
        "plugin is warned about",
    ),
    "prerequisites[].plugin_params": (HONOURED, "the plugin's parameters"),
    "prerequisites[].callbacks": (HONOURED, "cmd plugin commands at taskStarts/Succeeds/Fails"),
    "prerequisites[].callbacks[].event": (HONOURED, "taskStarts, taskSucceeds or taskFails"),
    "prerequisites[].callbacks[].commands": (HONOURED, "run in the instance at that event"),
    "prerequisites[].require": (HONOURED, "marketplace or http(s) references pulled in"),
    "prerequisites[].require[].name": (HONOURED, "the reference"),
    "prerequisites[].require[].template_variables": (HONOURED, "values for the item's variables"),
    "prerequisites[].requireStorages": (HONOURED, "admin-defined storages mounted with it"),
    "prerequisites[].requireStorages[].name": (HONOURED, "the storage, checked against grants"),
    "prerequisites[].requireStorages[].mountPath": (HONOURED, "where it is mounted"),
    "prerequisites[].template_variables": (HONOURED, "a marketplace item's variables"),
    "prerequisites[].failurePolicy": (
        HONOURED,
        "`ignore`: data or a script that cannot be fetched is skipped, with a warning event, "
        "and the instance starts; for a cmd plugin it is warned about",
    ),
    "prerequisites[].*": (
        WARNED,
        "other fields go to the prerequisite's plugin; without a plugin nothing reads them",
    ),
}
_EXTRAS = {
    "extras": (HONOURED, "the keys below; anything else is kept and warned about"),
    "extras.com.microsoft.pai.runtimeplugin": (
        HONOURED,
        "runtime plugins: `cmd` runs; `ssh`/`sshd` starts the image's sshd where it has one; "
        "`ssh`, `sshd` and `tensorboard` are warned about, saying what paigraph does and does "
        "not do; any other plugin is warned about",
    ),
    "extras.gangAllocation": (HONOURED, "false: instances start one by one, retried alone"),
    "extras.storages": (HONOURED, "admin-defined storages mounted in every role"),
    "extras.reference_prerequisites": (HONOURED, "seed 004's named marketplace references"),
    "extras.submitFrom": (HONOURED, "a label of where the job was written; kept"),
    "extras.hivedScheduler": (WARNED, "OpenPAI's HiveD scheduler; paigraph places jobs itself"),
    "extras.*": (WARNED, "kept with the job; nothing reads it"),
}

OUTCOMES: dict[str, dict[str, tuple[str, str]]] = {
    "draft": {
        "protocol_version": (HONOURED, "marks the draft dialect"),
        "name": (HONOURED, "the job's name; `.` and `~` are kept (see Names)"),
        "type": (HONOURED, "must be `job`"),
        "version": (HONOURED, "shown with the job"),
        "contributor": (HONOURED, "shown with the job"),
        "description": (HONOURED, "shown with the job"),
        "retryCount": (HONOURED, "job retries"),
        "virtualCluster": (HONOURED, "the virtual cluster it runs in"),
        "parameters": (HONOURED, "`$$name$$` and `{{ name }}` values"),
        "tasks": (HONOURED, "the task roles"),
        "job": (HONOURED, "the job nested under `job:` beside `prerequisites:`"),
        "killAllOnCompletedTaskNumber": (WARNED, "obsolete; minSucceededTaskCount replaces it"),
        "tasks[].role": (HONOURED, "the role's name"),
        "tasks[].name": (HONOURED, "the role's name, when `role` is not given"),
        "tasks[].dockerimage": (HONOURED, "the dockerimage prerequisite it runs in"),
        "tasks[].data": (HONOURED, "data prerequisites, fetched to `/work/<name>`"),
        "tasks[].script": (HONOURED, "the script prerequisite, cloned to `/work/<name>`"),
        "tasks[].output": (HONOURED, "the output prerequisite, mounted"),
        "tasks[].storage": (HONOURED, "the storage prerequisite, mounted"),
        "tasks[].command": (HONOURED, "the commands"),
        "tasks[].env": (HONOURED, "exported to every instance"),
        "tasks[].parameters": (HONOURED, "the job's parameters, overridden for this role"),
        "tasks[].minFailedTaskCount": (HONOURED, "completion rule"),
        "tasks[].minSucceededTaskCount": (HONOURED, "completion rule"),
        "tasks[].resource": (HONOURED, "instances, resources and ports"),
        "tasks[].resource.instances": (HONOURED, "instance count, or `$job.parameters.x`"),
        "tasks[].resource.resourcePerInstance": (HONOURED, "per-instance resources"),
        "tasks[].resource.resourcePerInstance.cpu": (HONOURED, "a container limit"),
        "tasks[].resource.resourcePerInstance.memoryMB": (HONOURED, "a container limit"),
        "tasks[].resource.resourcePerInstance.shmMB": (HONOURED, "the container's /dev/shm"),
        "tasks[].resource.resourcePerInstance.gpu": (HONOURED, "GPUs held for the instance"),
        "tasks[].resource.portList": (HONOURED, "ports allocated per instance"),
        "tasks[].resource.portList[].label": (HONOURED, "the port's label in PAI_* variables"),
        "tasks[].resource.portList[].beginAt": (HONOURED, "the first port wanted"),
        "tasks[].resource.portList[].portNumber": (HONOURED, "how many ports"),
        **_PREREQUISITE,
    },
    "v2": {
        "protocolVersion": (HONOURED, "must be 2"),
        "name": (HONOURED, "the job's name"),
        "type": (HONOURED, "must be `job`"),
        "version": (HONOURED, "shown with the job"),
        "contributor": (HONOURED, "shown with the job"),
        "description": (HONOURED, "shown with the job"),
        "parameters": (HONOURED, "`<% $parameters.x %>` values"),
        "secrets": (HONOURED, "`<% $secrets.x %>` values, kept in memory only"),
        "jobRetryCount": (HONOURED, "job retries"),
        "taskRoles": (HONOURED, "the task roles"),
        "deployments": (HONOURED, "commands around each role's commands"),
        "deployments[].name": (HONOURED, "named by `defaults.deployment`"),
        "deployments[].taskRoles": (HONOURED, "per role"),
        "deployments[].taskRoles.*.preCommands": (HONOURED, "run before the role's commands"),
        "deployments[].taskRoles.*.postCommands": (HONOURED, "run after them"),
        "deployments[].*": (WARNED, "nothing reads it"),
        "defaults": (HONOURED, "virtualCluster and deployment"),
        "defaults.virtualCluster": (HONOURED, "the virtual cluster it runs in"),
        "defaults.deployment": (HONOURED, "the deployment used"),
        "defaults.*": (WARNED, "nothing reads it"),
        "taskRoles.*.protocolVersion": (HONOURED, "must be 2 when given"),
        "taskRoles.*.instances": (HONOURED, "instance count"),
        "taskRoles.*.completion": (HONOURED, "completion rules"),
        "taskRoles.*.completion.minFailedInstances": (HONOURED, "completion rule"),
        "taskRoles.*.completion.minSucceededInstances": (HONOURED, "completion rule"),
        "taskRoles.*.taskRetryCount": (HONOURED, "per-instance retries (gangAllocation: false)"),
        "taskRoles.*.prerequisites": (HONOURED, "prerequisites and plugins the role uses"),
        "taskRoles.*.dockerImage": (HONOURED, "the dockerimage prerequisite it runs in"),
        "taskRoles.*.data": (HONOURED, "the data prerequisite, fetched to `/work/<name>`"),
        "taskRoles.*.script": (HONOURED, "the script prerequisite, cloned to `/work/<name>`"),
        "taskRoles.*.output": (HONOURED, "the output prerequisite, mounted"),
        "taskRoles.*.extraContainerOptions": (
            HONOURED,
            "shmMB; options asking for privilege (privileged, host network, capabilities, "
            "devices, host mounts...) are refused; other options are warned about",
        ),
        "taskRoles.*.extraContainerOptions.shmMB": (HONOURED, "the container's /dev/shm"),
        "taskRoles.*.extraContainerOptions.infiniband": (
            WARNED,
            "true asks for an InfiniBand device; neither backend gives one",
        ),
        "taskRoles.*.extraContainerOptions.*": (WARNED, "not an option paigraph knows"),
        "taskRoles.*.resourcePerInstance": (HONOURED, "per-instance resources"),
        "taskRoles.*.resourcePerInstance.cpu": (HONOURED, "a container limit"),
        "taskRoles.*.resourcePerInstance.memoryMB": (HONOURED, "a container limit"),
        "taskRoles.*.resourcePerInstance.gpu": (HONOURED, "GPUs held for the instance"),
        "taskRoles.*.resourcePerInstance.ports": (HONOURED, "ports allocated per instance"),
        "taskRoles.*.commands": (HONOURED, "the commands"),
        "extras.paigraph": (HONOURED, "what v2 cannot say, written by `paigraph resolve`"),
        **_PREREQUISITE,
        **_EXTRAS,
    },
    "v1": {
        "jobName": (HONOURED, "the job's name; `.` is kept (see Names)"),
        "image": (HONOURED, "the image every role runs in"),
        "authFile": (HONOURED, "registry credentials for the image, read as `auth` is"),
        "dataDir": (HONOURED, "exported as PAI_DATA_DIR"),
        "outputDir": (HONOURED, "exported as PAI_OUTPUT_DIR"),
        "codeDir": (HONOURED, "exported as PAI_CODE_DIR"),
        "virtualCluster": (HONOURED, "the virtual cluster it runs in"),
        "retryCount": (HONOURED, "job retries"),
        "jobEnvs": (HONOURED, "parameters, and exported to every instance"),
        "jobEnvs.*": (HONOURED, "exported as written"),
        "jobEnvs.paiAzRDMA": (WARNED, "asked OpenPAI for Azure RDMA devices; exported, no device"),
        "gpuType": (WARNED, "an OpenPAI GPU model; paigraph's nodes have none"),
        "killAllOnCompletedTaskNumber": (WARNED, "obsolete; minSucceededTaskCount replaces it"),
        "taskRoles": (HONOURED, "the task roles"),
        "taskRoles[].name": (HONOURED, "the role's name"),
        "taskRoles[].taskNumber": (HONOURED, "instance count"),
        "taskRoles[].cpuNumber": (HONOURED, "a container limit"),
        "taskRoles[].memoryMB": (HONOURED, "a container limit"),
        "taskRoles[].shmMB": (HONOURED, "the container's /dev/shm"),
        "taskRoles[].gpuNumber": (HONOURED, "GPUs held for the instance"),
        "taskRoles[].command": (HONOURED, "the command"),
        "taskRoles[].minFailedTaskCount": (HONOURED, "completion rule"),
        "taskRoles[].minSucceededTaskCount": (HONOURED, "completion rule"),
        "taskRoles[].portList": (HONOURED, "ports allocated per instance"),
        "taskRoles[].portList[].label": (HONOURED, "the port's label in PAI_* variables"),
        "taskRoles[].portList[].beginAt": (HONOURED, "the first port wanted"),
        "taskRoles[].portList[].portNumber": (HONOURED, "how many ports"),
        "extras.paigraph": (WARNED, "read in v2 documents only"),
        **_EXTRAS,
    },
}

PARSERS = {"draft": dialect_draft, "v2": dialect_v2, "v1": dialect_v1}

# --------------------------------------------------------------------------- the probes

BASES: dict[str, dict[str, Any]] = {
    "draft": {
        "protocol_version": "v2",
        "name": "probe",
        "type": "job",
        "prerequisites": [
            {"protocol_version": "v2", "name": "img", "type": "dockerimage", "uri": "ubuntu"},
            {"protocol_version": "v2", "name": "files", "type": "data", "uri": ["http://x/y"]},
        ],
        "tasks": [
            {
                "role": "worker",
                "dockerimage": "img",
                "data": "files",
                "resource": {"resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 0}},
                "command": ["echo hi"],
            }
        ],
    },
    "v2": {
        "protocolVersion": 2,
        "name": "probe",
        "type": "job",
        "prerequisites": [
            {"name": "img", "type": "dockerimage", "uri": "ubuntu"},
            {"name": "files", "type": "data", "uri": ["http://x/y"]},
        ],
        "taskRoles": {
            "worker": {
                "dockerImage": "img",
                "data": "files",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 0},
                "commands": ["echo hi"],
            }
        },
        "deployments": [{"name": "d", "taskRoles": {"worker": {"preCommands": ["true"]}}}],
        "defaults": {"deployment": "d"},
    },
    "v1": {
        "jobName": "probe",
        "image": "ubuntu",
        "taskRoles": [{"name": "worker", "memoryMB": 1024, "command": "echo hi"}],
    },
}

Probe = Callable[[dict[str, Any]], str]  # sets the field in the base document, returns its path


def _data(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["prerequisites"][1]


def _set(path: str, value: Any) -> Probe:
    """A probe that sets `path` (dotted, `[n]` for list items) to `value`."""

    def probe(doc: dict[str, Any]) -> str:
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        target = doc
        for part in parts[:-1]:
            target = (
                target[int(part[1:-1])] if part.startswith("[") else target.setdefault(part, {})
            )
        target[parts[-1]] = value
        return path

    return probe


def _other_prerequisite_field(doc: dict[str, Any]) -> str:
    _data(doc)["license"] = "MIT"
    return "prerequisites[1].license"


_EXTRAS_PROBES: dict[str, Probe] = {
    "extras.hivedScheduler": _set("extras.hivedScheduler", {"jobPriorityClass": "prod"}),
    "extras.*": _set("extras.team", "vision"),
}
PROBES: dict[str, dict[str, Probe]] = {
    "draft": {
        "killAllOnCompletedTaskNumber": _set("killAllOnCompletedTaskNumber", 1),
        "prerequisites[].*": _other_prerequisite_field,
    },
    "v2": {
        "deployments[].*": _set("deployments[0].when", "always"),
        "defaults.*": _set("defaults.priority", "high"),
        "taskRoles.*.extraContainerOptions.infiniband": _set(
            "taskRoles.worker.extraContainerOptions.infiniband", True
        ),
        "taskRoles.*.extraContainerOptions.*": _set(
            "taskRoles.worker.extraContainerOptions.cpusetCpus", "0"
        ),
        "prerequisites[].*": _other_prerequisite_field,
        **_EXTRAS_PROBES,
    },
    "v1": {
        "jobEnvs.paiAzRDMA": _set("jobEnvs.paiAzRDMA", "true"),
        "gpuType": _set("gpuType", "K80"),
        "killAllOnCompletedTaskNumber": _set("killAllOnCompletedTaskNumber", 1),
        "extras.paigraph": _set("extras.paigraph", {"jobRetryCount": -1}),
        **_EXTRAS_PROBES,
    },
}

# Values (not fields) with an outcome of their own: plugins paigraph runs or does not.
_RUNTIME_PLUGIN = "com.microsoft.pai.runtimeplugin"
VALUES: dict[str, tuple[str, str]] = {
    f"extras.{_RUNTIME_PLUGIN}[].plugin: cmd": (HONOURED, "its commands run"),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: ssh, sshd": (
        WARNED,
        "honoured where the image has an sshd (on the simulator): it runs on the `ssh` port "
        "with `userssh` and the `jobssh` key authorised and peers named `<role>-<index>`; "
        "warned, since an image without one gets no SSH server (`paigraph shell` and `exec` "
        "get in)",
    ),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: tensorboard": (
        WARNED,
        "its port is allocated and published; TensorBoard itself is not started",
    ),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: teamwise_storage": (
        WARNED,
        "deprecated in OpenPAI; list the storages under extras.storages",
    ),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: any other": (WARNED, "the job runs without it"),
    f"extras.{_RUNTIME_PLUGIN}[].failurePolicy: ignore (cmd)": (
        WARNED,
        "a failing cmd command still fails the instance",
    ),
    "prerequisites[].plugin: any other than cmd, pvc_storage": (
        WARNED,
        "its callbacks and fields have no effect",
    ),
    "prerequisites[].failurePolicy: ignore (cmd plugin)": (
        WARNED,
        "a failing callback still fails the instance",
    ),
}


def _plugins(entries: list[dict[str, Any]]) -> Probe:
    def probe(doc: dict[str, Any]) -> str:
        doc.setdefault("extras", {})[_RUNTIME_PLUGIN] = entries
        return f"extras.{_RUNTIME_PLUGIN}[{len(entries) - 1}]"

    return probe


def _prerequisite_plugin(plugin: str, **fields: Any) -> Probe:
    def probe(doc: dict[str, Any]) -> str:
        doc["prerequisites"].append({"name": "hook", "type": "script", "plugin": plugin, **fields})
        return f"prerequisites[{len(doc['prerequisites']) - 1}]"

    return probe


VALUE_PROBES: dict[str, tuple[Probe, str | None]] = {
    # probe, the field under the probe's path that is warned about (None: no warning at all)
    f"extras.{_RUNTIME_PLUGIN}[].plugin: cmd": (
        _plugins([{"plugin": "cmd", "parameters": {"preCommands": ["true"]}}]),
        None,
    ),
    # warned about at the entry, with codes of their own (see OWN_CODES)
    f"extras.{_RUNTIME_PLUGIN}[].plugin: ssh, sshd": (
        _plugins([{"plugin": "ssh", "parameters": {"jobssh": True}}]),
        "",
    ),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: tensorboard": (_plugins([{"plugin": "tensorboard"}]), ""),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: teamwise_storage": (
        _plugins([{"plugin": "teamwise_storage"}]),
        "plugin",
    ),
    f"extras.{_RUNTIME_PLUGIN}[].plugin: any other": (_plugins([{"plugin": "mpi"}]), "plugin"),
    f"extras.{_RUNTIME_PLUGIN}[].failurePolicy: ignore (cmd)": (
        _plugins([{"plugin": "cmd", "failurePolicy": "ignore", "parameters": {}}]),
        "failurePolicy",
    ),
    "prerequisites[].plugin: any other than cmd, pvc_storage": (
        _prerequisite_plugin("git"),
        "plugin",
    ),
    "prerequisites[].failurePolicy: ignore (cmd plugin)": (
        _prerequisite_plugin("cmd", failurePolicy="ignore", callbacks=[]),
        "failurePolicy",
    ),
}


def _accepted(dialect: str) -> set[str]:
    """The fields the dialect's parser reads, as dotted places."""
    fields = PARSERS[dialect].FIELDS
    return {f"{place}.{key}" if place else key for place, keys in fields.items() for key in keys}


def _containers(dialect: str) -> set[str]:
    """Places that are fields themselves (`tasks[].resource`), as the table lists them."""
    return {re.sub(r"\[\]$", "", place) for place in PARSERS[dialect].FIELDS if place}


# Values warned about with a code of their own, saying what paigraph does instead
OWN_CODES = {
    f"extras.{_RUNTIME_PLUGIN}[].plugin: ssh, sshd": "ssh-plugin-no-sshd",
    f"extras.{_RUNTIME_PLUGIN}[].plugin: tensorboard": "tensorboard-not-started",
}


def _ignored(doc: dict[str, Any], codes: tuple[str, ...] = (IGNORED, "obsolete")) -> list[str]:
    result = parse_job(json.dumps(doc))
    assert result.ok, result.errors
    return [w.path for w in result.warnings if w.code in codes]


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("dialect", sorted(OUTCOMES))
def test_every_accepted_field_has_an_outcome(dialect: str) -> None:
    accepted = _accepted(dialect) | {c for c in _containers(dialect) if "*" not in c[-1:]}
    listed = set(OUTCOMES[dialect])
    assert sorted(accepted - listed) == [], "fields the parser reads with no outcome here"
    assert sorted(listed - accepted) == [], "outcomes for fields the parser does not read"


@pytest.mark.parametrize("dialect", sorted(OUTCOMES))
def test_every_warned_field_has_a_probe(dialect: str) -> None:
    warned = {f for f, (outcome, _) in OUTCOMES[dialect].items() if outcome == WARNED}
    assert warned == set(PROBES[dialect])


@pytest.mark.parametrize("dialect", sorted(BASES))
def test_the_probes_base_documents_draw_no_warning(dialect: str) -> None:
    assert _ignored(BASES[dialect]) == []


@pytest.mark.parametrize(
    ("dialect", "field"), [(d, f) for d, probes in PROBES.items() for f in probes]
)
def test_a_warned_field_draws_its_warning_at_its_path(dialect: str, field: str) -> None:
    doc = copy.deepcopy(BASES[dialect])
    path = PROBES[dialect][field](doc)
    assert _ignored(doc) == [path]


@pytest.mark.parametrize("value", sorted(VALUE_PROBES))
def test_plugins_paigraph_does_not_run_are_warned_about_and_the_others_not(value: str) -> None:
    probe, warned_field = VALUE_PROBES[value]
    doc = copy.deepcopy(BASES["v2"])
    path = probe(doc)
    expected = [] if warned_field is None else [f"{path}.{warned_field}".rstrip(".")]
    own = OWN_CODES.get(value)
    assert _ignored(doc, (own,) if own else (IGNORED, "obsolete")) == expected
    assert (VALUES[value][0] == WARNED) == (warned_field is not None)


def test_the_warning_says_what_will_not_happen() -> None:
    doc = copy.deepcopy(BASES["v2"])
    PROBES["v2"]["extras.hivedScheduler"](doc)
    (warning,) = [w for w in parse_job(json.dumps(doc)).warnings if w.code == IGNORED]
    assert "HiveD" in warning.message and "paigraph places jobs itself" in warning.message
    assert warning.path_parts() == ["extras", "hivedScheduler"]


# ------------------------------------------------------------------------------- the docs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "dialects.md"
_BEGIN, _END = "<!-- field outcomes: begin -->", "<!-- field outcomes: end -->"


def markdown_table() -> str:
    """The table as docs/dialects.md shows it."""
    lines = ["| dialect | field | outcome | what happens |", "|---|---|---|---|"]
    for dialect in ("draft", "v2", "v1"):
        for field, (outcome, note) in OUTCOMES[dialect].items():
            lines.append(f"| {dialect} | `{field}` | {outcome} | {note} |")
    for value, (outcome, note) in VALUES.items():
        name, _, what = value.partition(": ")
        dialects = "draft, v2" if name.startswith("prerequisites") else "v2, v1"
        lines.append(f"| {dialects} | `{name}` = {what} | {outcome} | {note} |")
    return "\n".join(lines)


def test_docs_show_the_same_table() -> None:
    text = DOCS.read_text()
    assert _BEGIN in text and _END in text
    shown = text.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    assert shown == markdown_table(), "update docs/dialects.md with:\n" + markdown_table()
