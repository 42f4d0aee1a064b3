"""`python -m server.cli`: the `paigraph` command."""

from server.cli.main import main

main()
