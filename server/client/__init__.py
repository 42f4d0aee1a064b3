"""The `paigraph` commands that talk to a running server over its public API: jobs (`submit`,
`status`, `logs`, `top`, `stop`), `exec` and `shell`, `fs` and `market`."""
