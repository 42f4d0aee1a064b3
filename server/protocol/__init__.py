"""Job protocol engine: three dialects in, one canonical JobSpec out.

Parse (`loader`) -> detect the dialect (`engine.detect`) -> read and validate
(`dialect_draft`, `dialect_v2`, `dialect_v1`, each tables of
steps run by `outline`; shared `rules`) -> render (`render`) ->
write back as v2 (`writer`).
"""

from server.protocol.engine import Kind, ParseResult, detect, parse_document, parse_job, resolve_job
from server.protocol.issues import Issue, Severity
from server.protocol.model import Dialect, JobSpec, Prerequisite, PrerequisiteType, TaskRole
from server.protocol.secrets import mask_secrets
from server.protocol.writer import to_v2_dict, to_v2_yaml

__all__ = [
    "Dialect",
    "Issue",
    "JobSpec",
    "Kind",
    "ParseResult",
    "Prerequisite",
    "PrerequisiteType",
    "Severity",
    "TaskRole",
    "detect",
    "mask_secrets",
    "parse_document",
    "parse_job",
    "resolve_job",
    "to_v2_dict",
    "to_v2_yaml",
]
