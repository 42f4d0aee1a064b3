"""The fast executor: graphql-core's executor with plain fields completed in place.

`FastExecutionContext` (`executor`) is the `execution_context_class` of the schema served
with `PAIGRAPH_EXECUTOR=fast`; each mechanism it adds is a module of its own, whose docstring
says what it replaces in graphql-core and why:

- `field_plans`: attribute fields read and coerced without a resolve-info and resolver call;
- `compiled`: selections of such fields, all the way down, compiled into one function,
  also for the stored values a list's items are made of (a role's instances);
- `shared_events`: subscription events that never change, completed once for all subscribers;
- `weak_helpers`: resolvers' helpers without the reference cycle that left every request's
  objects to the cycle collector.

These override graphql-core internals, so the supported graphql-core range is pinned in
pyproject.toml. graphql-core's own executor stays available beside this one
(`PAIGRAPH_EXECUTOR=standard`, see server.api.schema), which never imports this package; the
API tests run under both, and tests/api/test_api_differential.py compares them on random queries.
"""

from server.api.execution.executor import FastExecutionContext

__all__ = ["FastExecutionContext"]
