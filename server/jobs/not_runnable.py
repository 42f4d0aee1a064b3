"""The error of a valid job that cannot run as it is."""

from __future__ import annotations


class NotRunnable(ValueError):
    """The job is valid but cannot run as it is; `path` names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
