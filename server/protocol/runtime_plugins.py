"""OpenPAI's `ssh` and `tensorboard` runtime plugins: what paigraph does with them, said as
warnings where the job is read.

Both come as entries of `extras.com.microsoft.pai.runtimeplugin` (`{plugin, parameters}`) or as
prerequisites with `plugin: com.microsoft.pai.runtimeplugin.<name>` (seed 004's form).

- `ssh` (`sshd` in OpenPAI's kube-runtime era): OpenPAI installs and starts an SSH server in
  every container. paigraph starts none (the images it runs need not have one; the test image
  has none): every instance still gets its `ssh` port and its peers' `<role>-<index>` names, and
  `paigraph shell` / `paigraph exec` get into an instance through the server instead.
- `tensorboard`: OpenPAI runs TensorBoard on the first task role's instance 0 at
  `parameters.port`. paigraph allocates and publishes a port labelled `tensorboard` on the
  first task role (shown with the job's ports, and in `$PAI_CONTAINER_HOST_tensorboard_PORT_LIST`)
  but installs and starts nothing: the warning says how to start TensorBoard on that port.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from server.protocol.issues import Issues
from server.protocol.model import JobSpec, PortRequest

RUNTIME_PLUGIN = "com.microsoft.pai.runtimeplugin"
TENSORBOARD_LABEL = "tensorboard"
SSH_PLUGINS = ("ssh", "sshd")


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
            issues.warn(path, "ssh-plugin-no-sshd", _ssh_message(name))
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
        f"the {name} plugin starts an SSH server in OpenPAI's containers; paigraph starts none "
        "(the image need not have one). Every instance still gets its `ssh` port "
        "($PAI_CONTAINER_SSH_PORT) and reaches its peers as <role>-<index>; to get into an "
        "instance use `paigraph shell JOB ROLE INDEX`, or `paigraph exec JOB ROLE INDEX -- CMD` "
        "for one command"
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
