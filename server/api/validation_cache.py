"""Each query document validated once, with strawberry's `ValidationCache`.

Every rule the schema validates with (the spec's rules and the depth and alias limits of
`server.api.limits`) is fixed when the server starts, so a document that passed validation once
passes it always; clients send the same few query texts over and over. strawberry's
`ValidationCache` keeps validation's answers by document (and schema and rules), least recently
used out first.

Only its "valid" answers are taken from it: an invalid document is validated again, by
strawberry's own step, so its errors are located in the text it came in. The cache finds
documents by their syntax tree, and two texts can have the same tree at the same offsets on
different lines (a space where the other has a line break); a cached error would give the
first text's line and column.
"""

from __future__ import annotations

from collections.abc import Iterator

from strawberry.extensions import ValidationCache

# As many documents as the parser cache keeps: the documents kept here are those kept there.
REMEMBERED = 256


class KnownValidDocuments(ValidationCache):
    """Marks a document the cache knows to be valid as validated (no errors). It must come
    before any extension that fails the operation in `on_validate` (`RequireOperationName`),
    whose error then stands."""

    def __init__(self, maxsize: int = REMEMBERED) -> None:
        super().__init__(maxsize=maxsize)

    def on_validate(self) -> Iterator[None]:
        library_step = super().on_validate()
        next(library_step)  # the cached answer, put in pre_execution_errors
        context = self.execution_context
        # Errors: None, so strawberry validates this document itself. Valid: a list of our
        # own, never the cached one, which anything that added to it would change for all.
        context.pre_execution_errors = None if context.pre_execution_errors else []
        yield
        next(library_step, None)
