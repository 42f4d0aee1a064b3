"""The GraphQL API, by domain: `jobs`, `marketplace` and `cluster` hold each domain's types
and fields; the modules here are what every domain shares.

`schema` assembles the Query, Mutation and Subscription types the domains build (each
domain's Query and Mutation are classes of their own, merged there), with `root_query`'s fields
about the whole graph (`version`, `node`); `graph_types` holds the types every domain shows
(`UserError`, `Node`, `PageInfo`, `User`); `loaders` batch the store reads of one request;
`auth`, `job_access` and `endpoint` decide who is asking and what they may read; `limits` and
`errors` bound what one request may ask and what a client sees when something fails;
`execution` is the fast executor.
"""
