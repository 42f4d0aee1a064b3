"""Docker image references checked against Docker's own reference grammar.

An image the engine cannot parse (`busybox latest`, `Ubuntu`) used to fail in the backend after
the job was stored; the grammar here is distribution/reference's, so what passes is what
`docker pull` accepts (the name at most 255 characters).
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 255
IMAGE_RULE = (
    "expected name[:tag][@digest] as Docker reads it, e.g. registry.example.org:5000/team/"
    "image:1.0 (path components in lowercase letters and digits, joined by '.', '_', '__' or "
    "'-'; a tag of up to 128 letters, digits, '_', '.' and '-'; a digest like sha256:<hex>)"
)

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])"
_DOMAIN = re.compile(rf"{_HOST}(?::[0-9]+)?", re.ASCII)
_PATH = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", re.ASCII)
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_DIGEST = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}", re.ASCII
)


def image_reference_problem(reference: str) -> str | None:
    """What is wrong with `reference` as a docker image reference, in words; None when Docker
    accepts it."""
    if not reference:
        return "the image reference is empty"
    if reference.split() != [reference]:  # whitespace somewhere (split() finds it in C)
        return f"{reference!r} contains whitespace"
    name, tag, digest = _split(reference)
    if digest is not None and not _DIGEST.fullmatch(digest):
        return f"{reference!r} has an invalid digest {digest!r} (e.g. sha256:<64 hex digits>)"
    if tag is not None and not _TAG.fullmatch(tag):
        return f"{reference!r} has an invalid tag {tag!r}"
    if len(name) > MAX_NAME_LENGTH:
        return f"the image name is longer than {MAX_NAME_LENGTH} characters"
    domain, path = _split_domain(name)
    if domain is not None and not _DOMAIN.fullmatch(domain):
        return f"{reference!r} has an invalid registry {domain!r}"
    if not _PATH.fullmatch(path):
        if _PATH.fullmatch(path.lower()):
            return f"{reference!r}: the repository path {path!r} must be lowercase"
        return f"{reference!r} has an invalid repository path {path!r}"
    return None


def _split(reference: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) as Docker splits them: the digest after '@', the tag after the
    last ':' that is not part of the registry's host:port."""
    rest, at, digest = reference.partition("@")
    last_colon, last_slash = rest.rfind(":"), rest.rfind("/")
    if last_colon > last_slash:
        return rest[:last_colon], rest[last_colon + 1 :], digest if at else None
    return rest, None, digest if at else None


def _split_domain(name: str) -> tuple[str | None, str]:
    """The registry part of a name, if its first component is one (as Docker decides)."""
    first, slash, rest = name.partition("/")
    if not slash:
        return None, name
    if any(c in first for c in ".:") or first == "localhost" or first.lower() != first:
        return first, rest
    return None, name
