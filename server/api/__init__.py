"""The GraphQL API, by domain (`jobs`, `marketplace`, `cluster`); the modules here are what
every domain shares: the schema's assembly, the shared types, loaders, authentication,
limits and the fast executor. docs/architecture.md ("The API by domain") says which is which.
"""
