"""A minimal Kubernetes REST client on httpx, for the fake kubelet: JSON dicts in and out,
list + watch with resourceVersion, merge patches. Reads a kubeconfig with client-certificate files
(what ``e2e.cluster`` writes) or a bearer token.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

JSON = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP status code, ``body`` the Status object (if any)."""

    def __init__(self, status: int, body: JSON) -> None:
        super().__init__(f"HTTP {status}: {body.get('message', body)}")
        self.status = status
        self.body = body


class Rest:
    """Kubernetes API access for one kubeconfig (its current context)."""

    def __init__(self, kubeconfig: Path, timeout: float = 10.0) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        ctx_name = cfg["current-context"]
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        tls = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
        if "client-certificate" in user:
            tls.load_cert_chain(user["client-certificate"], user["client-key"])
        headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}
        self.http = httpx.Client(base_url=cluster["server"], verify=tls, headers=headers, timeout=timeout,
                                 trust_env=False)

    def request(self, method: str, path: str, body: JSON | None = None, params: JSON | None = None,
                content_type: str = "application/json") -> JSON:
        data = None if body is None else json.dumps(body)
        resp = self.http.request(method, path, content=data, params=params,
                                 headers={"Content-Type": content_type})
        if resp.status_code >= 300:
            try:
                err = resp.json()
            except ValueError:
                err = {"message": resp.text}
            raise ApiError(resp.status_code, err)
        out: JSON = resp.json() if resp.content else {}
        return out

    def get(self, path: str, **params: Any) -> JSON:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, body: JSON | None = None) -> JSON:
        return self.request("DELETE", path, body)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 240,
              **params: Any) -> Iterator[JSON]:
        """Yield watch events (``{"type": ..., "object": ...}``) from ``resource_version``; raises
        ApiError(410) when the version is too old (the caller relists)."""
        query = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_seconds), **params}
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 30.0)
        with self.http.stream("GET", path, params=query, timeout=timeout) as resp:
            if resp.status_code >= 300:
                resp.read()
                raise ApiError(resp.status_code, {"message": resp.text})
            for line in resp.iter_lines():
                if not line:
                    continue
                event: JSON = json.loads(line)
                if event.get("type") == "ERROR":
                    obj = event.get("object", {})
                    raise ApiError(int(obj.get("code", 500)), obj)
                yield event
