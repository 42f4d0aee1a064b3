"""Pulling a role's image on the simulator, logged in with its dockerimage's `auth`.

Only when the simulator's `image_pull` setting is on: by default nothing is downloaded behind
the user's back. The credentials go to the Docker engine with the pull request itself (the
SDK's `auth_config`, the engine's X-Registry-Auth header), so nothing is written to the
engine's or this user's credential store, and they appear in no message: an error from the
registry is shown with the username and password masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors

from backends.base import ImageAuth, RoleLaunch
from backends.secrets_env import SECRET_REF

MASK = "***"


class PullFailed(Exception):
    """The image could not be pulled; the message names it and never holds a credential."""


class MissingSecret(PullFailed):
    """The auth refers to a secret the job does not define (gone after a server restart)."""


def auth_config(
    role: RoleLaunch, secrets: Mapping[str, str], read_file: Callable[[str], str]
) -> dict[str, str] | None:
    """What the Docker SDK takes as `auth_config` for the role's image, secrets filled in, or
    read from a v1 authFile with `read_file`."""
    auth = role.image_auth
    if auth is None:
        return None
    if auth.file:
        return _from_auth_file(auth.file, read_file(auth.file))
    config = {
        "username": _rendered(role, auth, "username", secrets),
        "password": _rendered(role, auth, "password", secrets),
    }
    if auth.registry:
        config["serveraddress"] = auth.registry
    return config


def pull(
    client: docker.DockerClient,
    image: str,
    auth: dict[str, str] | None,
    progress: Callable[[str], None],
) -> None:
    """Pull `image` (logged in with `auth` when given)."""
    # the username is a credential too (a secret, or a line of an authFile): never shown
    who = " with the credentials of its auth" if auth else ""
    progress(f"pulling image {image}{who}")
    kwargs: dict[str, Any] = {"auth_config": dict(auth)} if auth else {}
    try:
        client.images.pull(image, **kwargs)
    except docker.errors.APIError as exc:
        explanation = getattr(exc, "explanation", None) or str(exc)
        raise PullFailed(
            f"image {image!r} could not be pulled{who}: {masked(str(explanation), auth)}"
        ) from None
    except docker.errors.DockerException as exc:
        raise PullFailed(
            f"image {image!r} could not be pulled{who}: {masked(str(exc), auth)}"
        ) from None


def masked(text: str, auth: Mapping[str, str] | None) -> str:
    """`text` with the password and the username (when there are) replaced by a mask."""
    for what in ("password", "username"):
        value = (auth or {}).get(what)
        text = text.replace(value, MASK) if value else text
    return text


def _from_auth_file(location: str, text: str) -> dict[str, str]:
    """OpenPAI's v1 authFile: the registry server, the username and the password, one a line
    (`docker.io` for Docker Hub)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 3:
        raise PullFailed(
            f"authFile {location}: needs three lines (registry server, username, password), "
            f"has {len(lines)}"
        )
    registry, username, password = lines[:3]
    return {"username": username, "password": password, "serveraddress": registry}


def _rendered(role: RoleLaunch, auth: ImageAuth, what: str, secrets: Mapping[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in secrets:
            raise MissingSecret(
                f"task role {role.name!r}: the {what} of its dockerimage's auth refers to the "
                f"secret {key!r}, which the job does not define (secrets are kept in memory "
                "only: a job resumed after a server restart has none)"
            )
        return secrets[key]

    return SECRET_REF.sub(fill, getattr(auth, what))
