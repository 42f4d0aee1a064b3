"""OpenPAI's `ssh` and `tensorboard` runtime plugins: what paigraph does with them, said as
warnings where the job is read.

paigraph installs nothing in an image, so each warning says what is done instead (an sshd the
image has started with the job's keys; a published `tensorboard` port): docs/instance-access.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from server.protocol.issues import Issues
from server.protocol.model import JobSpec, PortRequest

RUNTIME_PLUGIN = "com.microsoft.pai.runtimeplugin"
TENSORBOARD_LABEL = "tensorboard"
SSH_PLUGINS = ("ssh", "sshd")
_PUBLIC_KEY = re.compile(
    r"(ssh-(rsa|dss|ed25519)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)"
    r"@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\n]*)?"
)


# `<% $secrets.x %>` and `<% $parameters.x %>` in a plugin parameter, filled in at launch
_TEMPLATE = re.compile(r"<%\s*\$(secrets|parameters)\.([-._a-zA-Z0-9]+)\s*%>")


@dataclass(frozen=True)
class SshPlugin:
    """What a job's ssh plugin asks for: a key pair for the job, and the user's keys.
    `problem` says what is wrong with `userssh` once its references are filled in, at
    `path`."""

    jobssh: bool = False
    user_keys: list[str] = field(default_factory=list)
    path: str = ""
    problem: str | None = None


def ssh_plugin(spec: JobSpec) -> SshPlugin | None:
    """The job's ssh plugin (the first entry naming it, as OpenPAI reads one), or None. Its
    `userssh` is read with the job's secrets and parameters filled in (OpenPAI's own ssh test
    job gives `value: <% $secrets.userssh %>`), so call it on the spec a launch is built
    from, which holds the secrets."""
    for path, name, parameters in plugin_uses(spec):
        if name in SSH_PLUGINS:
            written = parameters.get("userssh")
            secret = "$secrets." in str(written)
            keys, problem = _user_keys(_filled(written, spec), templates=False, secret=secret)
            return SshPlugin(
                jobssh=_truthy(parameters.get("jobssh")),
                user_keys=keys,
                path=f"{path}.parameters.userssh",
                problem=problem,
            )
    return None


def _filled(userssh: Any, spec: JobSpec) -> Any:
    """`userssh` with its `<% $secrets.x %>` / `<% $parameters.x %>` replaced by their values;
    a reference to something the job does not define stays as written."""
    sources = {"secrets": spec.secrets, "parameters": spec.parameters}

    def fill(text: str) -> str:
        def value(match: re.Match[str]) -> str:
            found = sources[match.group(1)].get(match.group(2))
            return match.group(0) if found is None else str(found)

        return _TEMPLATE.sub(value, text)

    if isinstance(userssh, str):
        return fill(userssh)
    if isinstance(userssh, dict) and isinstance(userssh.get("value"), str):
        return {**userssh, "value": fill(userssh["value"])}
    return userssh


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _user_keys(
    userssh: Any, *, templates: bool = True, secret: bool = False
) -> tuple[list[str], str | None]:
    """The public keys of `userssh`, and what is wrong with it. OpenPAI's `ssh` plugin takes
    {type, value} (type `custom`: value holds the keys); the older `sshd` took the key itself.
    With `templates` (as the job is read), a value that refers to a secret or a parameter is
    judged later, once they are filled in; without, a reference left is a problem. With
    `secret` (the value came from a secret) a problem does not quote it."""
    if isinstance(userssh, str):
        value: Any = userssh
    elif isinstance(userssh, dict):
        value = userssh.get("value")
        if value is not None and not isinstance(value, str):
            return [], "value must be an OpenSSH public key line (ssh-ed25519 AAAA... comment)"
    elif userssh is None:
        return [], None
    else:
        return [], "must be a map {type: custom, value: <public key>} or a public key line"
    if not value or not value.strip():
        return [], None
    left = _TEMPLATE.search(value)
    if left is not None:
        if templates:
            return [], None
        return [], (
            f"value refers to {left.group(0)}, which the job's {left.group(1)} do not define "
            f"(secrets are kept in memory only: a job resumed after a restart has none)"
        )
    keys = [line.strip() for line in value.splitlines() if line.strip()]
    bad = [k for k in keys if not _PUBLIC_KEY.fullmatch(k)]
    if bad and secret:
        return [], (
            "value must hold OpenSSH public key lines (ssh-ed25519 AAAA... comment); the "
            "secret it refers to holds a line that is not one"
        )
    if bad:
        shown = bad[0] if len(bad[0]) <= 40 else bad[0][:40] + "..."
        return [], (
            f"value must hold OpenSSH public key lines (ssh-ed25519 AAAA... comment); "
            f"{shown!r} is not one"
        )
    return keys, None


def plugin_uses(spec: JobSpec) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, plugin name, parameters) of every runtime plugin the job names."""
    entries = spec.extras.get(RUNTIME_PLUGIN)
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get("plugin"), str):
            parameters = entry.get("parameters")
            yield (
                f"extras.{RUNTIME_PLUGIN}[{i}]",
                entry["plugin"],
                parameters if isinstance(parameters, dict) else {},
            )
    for i, prerequisite in enumerate(spec.prerequisites):
        plugin = prerequisite.plugin or ""
        if plugin.startswith(f"{RUNTIME_PLUGIN}."):
            name = plugin.removeprefix(f"{RUNTIME_PLUGIN}.")
            yield f"prerequisites[{i}]", name, dict(prerequisite.plugin_parameters)


def apply_runtime_plugins(spec: JobSpec, issues: Issues) -> JobSpec:
    """`spec` with a `tensorboard` port on its first role when the plugin is asked for; a
    warning for each ssh or tensorboard plugin, saying what happens instead."""
    tensorboard = False
    for path, name, parameters in plugin_uses(spec):
        if name in SSH_PLUGINS:
            _keys, problem = _user_keys(parameters.get("userssh"))
            if problem is not None:
                issues.error(f"{path}.parameters.userssh", "invalid-userssh", problem)
            issues.warn(path, "ssh-plugin-no-sshd", _ssh_message(name))
            if _truthy(parameters.get("sshbarrier")):
                issues.warn(
                    f"{path}.parameters.sshbarrier",
                    "ssh-barrier-not-supported",
                    "OpenPAI's ssh barrier waits until every instance's sshd answers; paigraph "
                    "does not wait: the commands start as soon as this instance's sshd does, "
                    "so retry a first `ssh <role>-<index>` until the peer answers",
                )
        elif name == "tensorboard" and spec.task_roles:
            tensorboard = True
            issues.warn(path, "tensorboard-not-started", _tensorboard_message(spec, parameters))
    if not tensorboard or not spec.task_roles:
        return spec
    first = spec.task_roles[0]
    if first.resources.port(TENSORBOARD_LABEL) is not None:
        return spec
    ports = [*first.resources.ports, PortRequest(label=TENSORBOARD_LABEL)]
    role = first.model_copy(
        update={"resources": first.resources.model_copy(update={"ports": ports})}
    )
    return spec.model_copy(update={"task_roles": [role, *spec.task_roles[1:]]})


def _ssh_message(name: str) -> str:
    return (
        f"the {name} plugin starts sshd on each instance's `ssh` port ($PAI_CONTAINER_SSH_PORT), "
        "with userssh and the jobssh key authorised and peers named <role>-<index>, only if the "
        "image has an sshd: paigraph installs none (and starts none on Kubernetes). If the "
        "image has no sshd, no SSH server runs (the instance's log says so): get into "
        "an instance with `paigraph shell JOB ROLE INDEX`, or `paigraph exec JOB ROLE INDEX -- "
        "CMD` for one command"
    )


def _tensorboard_message(spec: JobSpec, parameters: dict[str, Any]) -> str:
    role = spec.task_roles[0].name
    asked = parameters.get("port")
    instead = f" instead of port {asked}" if isinstance(asked, int) else ""
    return (
        f"paigraph publishes a port labelled `tensorboard` on task role {role!r} (the first, "
        f"where OpenPAI runs TensorBoard){instead}, shown with the job's ports, but installs "
        "and starts nothing: start TensorBoard in the role's commands, e.g. `tensorboard "
        "--logdir DIR --bind_all --port $PAI_CONTAINER_HOST_tensorboard_PORT_LIST &`"
    )
