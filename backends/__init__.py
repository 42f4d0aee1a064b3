"""Backends that run resolved jobs: the Docker cluster simulator and Kubernetes."""
