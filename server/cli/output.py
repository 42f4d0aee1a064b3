"""The consoles the `paigraph` commands print with.

On a terminal, output is as wide as the terminal. Elsewhere (a pipe, a file, a CI log) rich
would take the width of whichever standard stream is a terminal, else 80 columns, and cut or
fold tables there; these consoles have no such limit, so every line reaches the reader or the
next program whole.
"""

from __future__ import annotations

from rich.console import Console, ConsoleDimensions

UNLIMITED = 100_000  # columns: wider than any line the commands print


class _Console(Console):
    """A rich console whose width is the terminal's only when it writes to one, decided
    each time it prints (the stream may be swapped, as tests do)."""

    @property
    def size(self) -> ConsoleDimensions:
        measured = super().size
        if self.is_terminal:
            return measured
        return ConsoleDimensions(UNLIMITED, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        """As rich's: a console's size stays settable."""
        self.width, self.height = new_size


def console(stderr: bool = False) -> Console:
    """A console on standard output (or error): no syntax highlighting, long lines kept
    whole, full width when the stream is not a terminal."""
    return _Console(stderr=stderr, highlight=False, soft_wrap=True)
