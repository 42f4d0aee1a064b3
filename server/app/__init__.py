"""The running server: the Starlette app (`asgi.py`) and what it serves beside the GraphQL API
(the web UI, security headers, the `/exec` framing), how uvicorn serves it, the usage sampler,
and what `paigraph serve` says when it stops."""
