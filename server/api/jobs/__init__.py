"""The jobs in the graph: their types, the Query and Mutation fields that read, dry-run,
submit and stop them, their subscriptions, what their instances use, and `/exec` into a
running instance.

A role's prerequisites link to the marketplace item they came from through `strawberry.lazy`,
the one way this package reaches `server.api.marketplace` (which builds on these types).
"""
