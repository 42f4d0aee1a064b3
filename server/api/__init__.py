"""The GraphQL API: strawberry types, queries and mutations."""
