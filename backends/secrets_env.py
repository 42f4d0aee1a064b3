"""How a job's secrets reach its commands without being written to any file.

The files a backend keeps and the database must never hold a secret, so `<% $secrets.x %>` is
replaced by a shell expression that reads the value when the command runs: the container's
environment on Docker, a mounted Secret on Kubernetes (docs/security.md).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping

from backends.base import LaunchRequest, RoleLaunch

SECRET_REF = re.compile(r"<%\s*\$secrets\.([-._a-zA-Z0-9]+)\s*%>")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
SECRET_PREFIX = "PAI_SECRET_"


def secret_values(request: LaunchRequest) -> dict[str, str]:
    """The secrets a command can refer to (names `SECRET_REF` can match)."""
    return {k: v for k, v in request.secrets.items() if SECRET_KEY.fullmatch(k)}


def secret_variable(name: str) -> str:
    """The environment variable that carries secret `name`: letters and digits kept, any other
    character (`_` too) written `_XX` in hex, so two names never share a variable."""
    encoded = "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):02X}" for c in name)
    return SECRET_PREFIX + encoded


def secret_environment(request: LaunchRequest) -> dict[str, str]:
    """The container environment that carries the request's secrets (Docker)."""
    return {secret_variable(k): v for k, v in secret_values(request).items()}


def with_secret_references(
    role: RoleLaunch, known: Mapping[str, str], read: Callable[[str], str]
) -> RoleLaunch:
    """The role with each `<% $secrets.x %>` of a known secret in its commands and hooks
    replaced by `read(x)`, a shell expression that yields the value when the command runs."""
    if not known:
        return role

    def swap(text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            key = match.group(1)
            return read(key) if key in known else match.group(0)

        return SECRET_REF.sub(replace, text)

    hooks = role.hooks.model_copy(
        update={
            "on_start": [swap(c) for c in role.hooks.on_start],
            "on_success": [swap(c) for c in role.hooks.on_success],
            "on_failure": [swap(c) for c in role.hooks.on_failure],
        }
    )
    return role.model_copy(update={"commands": [swap(c) for c in role.commands], "hooks": hooks})


def with_secret_variables(role: RoleLaunch, request: LaunchRequest) -> RoleLaunch:
    """The role as the Docker backend runs it: secrets read from `secret_environment`."""
    return with_secret_references(
        role, secret_values(request), lambda key: "${" + secret_variable(key) + "}"
    )


def is_reference(value: str) -> bool:
    """Whether a credential is written as `<% $secrets.x %>` (and so holds no value)."""
    return SECRET_REF.fullmatch(value.strip()) is not None


def masked_credential(value: str) -> str:
    """What a record keeps of a credential written as itself: a digest, so two records of the
    same credential still compare equal and a registry Secret keeps its name, never the value."""
    return f"<masked {hashlib.sha256(value.encode()).hexdigest()[:12]}>"


def kept_request(request: LaunchRequest) -> LaunchRequest:
    """The request as a backend may keep it (Docker's launch record, the Kubernetes
    ConfigMap): its image credentials, when written as themselves rather than as secret
    references, replaced by `masked_credential`. The caller leaves out `secrets` as well.

    The server lifts every credential a job writes into its secrets before a request is made
    (server.protocol.credentials), so this holds even for a request made some other way."""
    roles = []
    for role in request.roles:
        auth = role.image_auth
        if auth is not None:
            masked = {
                what: masked_credential(value)
                for what in ("username", "password")
                if (value := getattr(auth, what)) and not is_reference(value)
            }
            if masked:
                role = role.model_copy(update={"image_auth": auth.model_copy(update=masked)})
        roles.append(role)
    return request.model_copy(update={"roles": roles})
