"""The GraphQL API.

`schema` assembles `queries`, `mutations` and `subscriptions` over the types of `types`,
`resolved` (the dry run) and `cluster`; `loaders` batch the store reads of one request;
`auth` and `endpoint` decide who is asking; `limits` and `errors` bound what one request may
ask and what a client sees when something fails.
"""
