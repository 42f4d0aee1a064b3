"""The fast executor: graphql-core's executor with plain fields completed in place.

`FastExecutionContext` (`executor`) is the schema's `execution_context_class` under
`PAIGRAPH_EXECUTOR=fast`; each mechanism is a module of its own. It overrides graphql-core
internals, so their range is pinned in pyproject.toml; docs/architecture.md ("The fast
executor") lists the modules and how both executors are held to the same answers.
"""

from server.api.execution.executor import FastExecutionContext

__all__ = ["FastExecutionContext"]
