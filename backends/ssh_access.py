"""The ssh runtime plugin inside an instance: the files a backend writes for it and the lines
of the entrypoint that start an SSH server with them.

As OpenPAI's plugin, it lets every instance `ssh <role>-<index>` every other where the image has
an sshd; an image without one gets a line in the log (docs/instance-access.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from backends.base import LaunchRequest, SshAccess

AUTHORIZED_KEYS = "authorized_keys"
JOB_KEY = "job_key"  # the job's private key (mode 0600 on the host)
CLIENT_CONFIG = "config"
JOB_KEY_NAME = "id_paigraph_job"  # the job key's name in ~/.ssh


def ssh_files(request: LaunchRequest, env: Mapping[str, str]) -> dict[str, str]:
    """File name -> content of what the instance with environment `env` needs for the plugin
    (nothing when the job does not ask for it). Peers come from the PAI_* variables, as the
    entrypoint would read them: `<role>-<index>` at its address and `ssh` port."""
    access = request.ssh
    if access is None:
        return {}
    files = {AUTHORIZED_KEYS: "".join(f"{key.strip()}\n" for key in access.authorized_keys)}
    if access.job_private_key:
        files[JOB_KEY] = access.job_private_key
    files[CLIENT_CONFIG] = _client_config(request, env, access)
    return files


def _client_config(request: LaunchRequest, env: Mapping[str, str], access: SshAccess) -> str:
    lines = ["# Every instance of this job, by <role>-<index> (written by paigraph)"]
    for role in request.roles:
        for index in range(role.instances):
            address = env.get(f"PAI_HOST_IP_{role.name}_{index}")
            port = env.get(f"PAI_PORT_LIST_{role.name}_{index}_ssh", "").split(",")[0]
            if not address or not port:
                continue
            lines += [f"Host {role.name}-{index}", f"  HostName {address}", f"  Port {port}"]
            lines += ["  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null"]
            lines += ["  LogLevel ERROR"]
            if access.job_private_key:
                lines.append(f"  IdentityFile ~/.ssh/{JOB_KEY_NAME}")
    return "\n".join(lines) + "\n"


def sshd_lines(ssh_dir: str) -> list[str]:
    """Entrypoint lines (POSIX sh, after the runtime environment is read) that start sshd on
    $PAI_CONTAINER_SSH_PORT with the files in `ssh_dir`, or say that the image has none."""
    q = shlex.quote
    d = q(ssh_dir)
    return [
        "",
        "# ssh runtime plugin: an SSH server on the instance's ssh port, where the image has one",
        "start_sshd() {",
        "  _pg_sshd=$(command -v sshd 2>/dev/null)",
        '  [ -n "$_pg_sshd" ] || { [ -x /usr/sbin/sshd ] && _pg_sshd=/usr/sbin/sshd; }',
        '  if [ -z "$_pg_sshd" ]; then',
        '    say "ssh plugin: the image has no sshd, so no SSH server runs;'
        ' use paigraph shell or paigraph exec to get in"',
        "    return 0",
        "  fi",
        "  _pg_home=${HOME:-/root}",
        '  mkdir -p "$_pg_home/.ssh" && chmod 700 "$_pg_home/.ssh" || return 1',
        f'  cat {d}/{AUTHORIZED_KEYS} >>"$_pg_home/.ssh/authorized_keys" || return 1',
        '  chmod 600 "$_pg_home/.ssh/authorized_keys"',
        f'  cat {d}/{CLIENT_CONFIG} >>"$_pg_home/.ssh/config" || return 1',
        '  chmod 600 "$_pg_home/.ssh/config"',
        f"  if [ -f {d}/{JOB_KEY} ]; then",
        f'    (umask 077 && cat {d}/{JOB_KEY} >"$_pg_home/.ssh/{JOB_KEY_NAME}") || return 1',
        "  fi",
        "  mkdir -p /run/sshd && chmod 755 /run/sshd",
        "  ssh-keygen -A >/dev/null || return 1",
        '  "$_pg_sshd" -p "$PAI_CONTAINER_SSH_PORT" -o PasswordAuthentication=no'
        " -o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password || return 1",
        '  say "ssh plugin: sshd listens on port $PAI_CONTAINER_SSH_PORT"',
        "}",
        'start_sshd || say "ssh plugin: could not start sshd (exit code $?); the commands run'
        ' without it"',
    ]
