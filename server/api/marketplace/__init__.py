"""The marketplace in the graph: items, their versions and templates, and the Query and
Mutation fields over them, built on the job types (a template's task roles are a job's)."""
