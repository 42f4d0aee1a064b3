"""The `paigraph` command line: the typer app (`main.py`), the help, output and arguments every
command shares, and the commands that run on this machine (`run`, `doctor`, `users`)."""
