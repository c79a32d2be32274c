"""Clients of the outside world: the Kubernetes API and SGLang's HTTP endpoints."""
