"""The exit handler's work, after every night of a compiled file, failed ones too: compose the
night's message (components/night_report/compose.py), keep it in the serving folder as `run`
does (`status` reads it), remove the night's facts, and deliver it to the webhook, if one is
configured, within message.DELIVERY_SECONDS. Nothing here fails the run: each part that
breaks is said in the step's log and the next part goes on."""

from __future__ import annotations

import os
from typing import Any

from components.night_report import secret
from components.night_report.compose import compose
from components.night_report.message import NOTIFY_VARIABLE, check_url, deliver, record
from components.storage import night_facts as facts
from components.storage import paths


def webhook(runner: str, notify_secret: str) -> tuple[str | None, str]:
    """(the URL or None, why there is none): from the secret's variable (Kubeflow) or from
    Secret Manager (Vertex, `notify_secret` names the secret)."""
    try:
        if runner == "vertex":
            if not notify_secret:
                return None, "no --notify-secret compiled in"
            url = secret.read_secret(notify_secret)
        else:
            url = os.environ.get(NOTIFY_VARIABLE, "")
            if not url:
                return None, f"no {NOTIFY_VARIABLE} in the step's environment"
        return check_url(url), ""
    except (secret.SecretError, ValueError) as err:
        return None, str(err)


def report_night(
    final_status: Any, serving_model_dir: str, night_key: str, runner: str, notify_secret: str
) -> dict[str, Any]:
    """The night's message, kept and delivered; returns it (with `notification`)."""
    from components.storage.served_versions import newest_complete_version

    kept_dir = facts.folder(serving_model_dir, night_key)
    kept = facts.read_all(kept_dir)
    try:
        served_after = newest_complete_version(serving_model_dir)
    except Exception as err:
        print(f"warning: the served version was not read: {err}")
        served_after = None
    night = compose(final_status, kept, served_after, runner)
    print(f"outcome        {night['outcome']}")
    url, why = webhook(runner, notify_secret)
    night["notification"] = deliver(url, night) if url else f"not delivered: {why}"
    print(f"notification   {night['notification']}")
    try:
        print(f"record         {record(serving_model_dir, night)}")
    except Exception as err:
        print(f"warning: the night's record was not kept: {err}")
    if kept_dir:
        try:
            paths.remove_tree(kept_dir)
        except Exception as err:
            print(f"warning: {kept_dir} was not removed: {err}")
    return night
