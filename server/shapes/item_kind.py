"""The kinds of marketplace item: stored in the item table and used by the marketplace's rules."""

from __future__ import annotations

from enum import StrEnum


class ItemKind(StrEnum):
    JOB_TEMPLATE = "job_template"
    DOCKERIMAGE = "dockerimage"
    DATA = "data"
    SCRIPT = "script"
    STORAGE = "storage"
    OUTPUT = "output"
    PLUGIN = "plugin"
