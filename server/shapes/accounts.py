"""The rule every stored name follows (users, virtual clusters and groups, storages and their
volumes) and the form a bearer token is stored in: the store enforces them, and the API, the
marketplace and the command line check a name or hash a token with them before asking the
store."""

from __future__ import annotations

import hashlib
import re

from server.shapes.store_errors import InvalidValue

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str, what: str = "user name") -> str:
    if not _NAME.fullmatch(name):
        raise InvalidValue(
            f"{what} {name!r} is not allowed: use 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name
