"""Where a compiled file's exit handler finds the webhook URL, never in the file itself:
Kubeflow gives the handler's container $CIFAR10_NOTIFY_URL from a Kubernetes secret (the
file's platform spec); Vertex names a Secret Manager secret, read here at run time with the
pipeline's service account (Application Default Credentials)."""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.request

API = "https://secretmanager.googleapis.com/v1"
# Tests point the handler at a local stand-in of the API with this variable.
ENDPOINT_VARIABLE = "CIFAR10_SECRET_MANAGER_ENDPOINT"
SECRET_NAME = re.compile(r"^projects/[^/\s]+/secrets/[^/\s]+(/versions/[^/\s]+)?$")
SECONDS = 10.0


class SecretError(RuntimeError):
    """The secret could not be read; the message names the secret, never its value."""


def check_name(name: str) -> str:
    """A Secret Manager secret name, with `/versions/latest` when it names no version."""
    if not SECRET_NAME.match(name):
        raise ValueError(
            f"--notify-secret '{name}': with --target vertex, name a Secret Manager secret: "
            "projects/PROJECT/secrets/NAME[/versions/VERSION]"
        )
    return name if "/versions/" in name else f"{name}/versions/latest"


def _default_token() -> str:
    import google.auth
    import google.auth.transport.requests

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    credentials.refresh(google.auth.transport.requests.Request())
    return credentials.token


def read_secret(name: str, token_source=None, endpoint: str | None = None) -> str:
    """The secret version's payload as text. Raises SecretError."""
    base = (endpoint or os.environ.get(ENDPOINT_VARIABLE) or API).rstrip("/")
    try:
        request = urllib.request.Request(
            f"{base}/{check_name(name)}:access",
            headers={"Authorization": f"Bearer {(token_source or _default_token)()}"},
        )
        with urllib.request.urlopen(request, timeout=SECONDS) as answer:
            data = json.loads(answer.read())["payload"]["data"]
        return base64.b64decode(data).decode().strip()
    except Exception as err:
        why = getattr(err, "code", None) or getattr(err, "reason", None) or type(err).__name__
        raise SecretError(f"secret {name} not read: {why}") from None
