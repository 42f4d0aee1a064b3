"""The paigraph service: protocol engine, marketplace, jobs, store, GraphQL API, CLI."""
