"""Who may read which jobs: the one rule every query, subscription and list of jobs applies.

`all` (OpenPAI's rule, the default) or `own` (`--job-visibility`, $PAIGRAPH_JOB_VISIBILITY),
under which another user's job is exactly like one that does not exist; everything a job
shows is reached through the job, so it follows. See docs/security.md ("Who reads which jobs").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum

from server.shapes.values import User

JOB_VISIBILITY_ENV = "PAIGRAPH_JOB_VISIBILITY"


class JobVisibility(StrEnum):
    ALL = "all"  # every signed-in user reads every job (OpenPAI's rule)
    OWN = "own"  # a user reads their own jobs; an admin every job


def job_visibility_setting(
    value: str | None = None, environ: Mapping[str, str] | None = None
) -> JobVisibility:
    """The rule to serve: `value`, else $PAIGRAPH_JOB_VISIBILITY, else `all`. ValueError,
    naming the setting and the values it takes, for anything else."""
    if value is None:
        value = (os.environ if environ is None else environ).get(JOB_VISIBILITY_ENV, "")
    chosen = value.strip().lower() or JobVisibility.ALL.value
    try:
        return JobVisibility(chosen)
    except ValueError:
        values = ", ".join(v.value for v in JobVisibility)
        raise ValueError(
            f"{JOB_VISIBILITY_ENV} (or --job-visibility) must be one of {values}, got {value!r}"
        ) from None


def reader_limit(visibility: JobVisibility, viewer: User) -> int | None:
    """The one check: the id of the only owner whose jobs `viewer` may read, or None when the
    viewer may read every job. Lists filter by it; single reads ask `may_read`."""
    if visibility is JobVisibility.ALL or viewer.admin:
        return None
    return viewer.id


def may_read(visibility: JobVisibility, viewer: User, owner_id: int) -> bool:
    """Whether `viewer` may read a job of the user `owner_id` (see `reader_limit`)."""
    limit = reader_limit(visibility, viewer)
    return limit is None or limit == owner_id
