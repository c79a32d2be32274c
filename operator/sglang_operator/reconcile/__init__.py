"""Pure reconcile decisions: Kubernetes objects and SGLang readings in, status and actions out."""
