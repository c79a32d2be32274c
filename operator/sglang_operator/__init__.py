"""sglang-operator: a Kubernetes operator for SGLang servers with MTP / NEXTN speculative decoding."""

__version__ = "0.1.0"
