"""Rollback: versions taken out of the folder TF Serving reads, under the push lock, so the
newest complete version left is served. Each is kept aside (served_versions.ROLLED_BACK_DIR)
with a record of who, when and why, and every later night reads it there: it is never served,
warmed-started from, compared with or indexed again, and the spans it was trained on are not
retrained unattended (spans.check_not_stale).

Taking a version out: its record first, then its files aside, then its saved_model.pb removed
from the serving folder (the moment it stops counting as complete: the commit point, as for a
push), then the rest. On a local disk the folder is renamed in one step. A rollback that dies
midway leaves a numbered folder without saved_model.pb, which the next push removes.

A version deployed to a Vertex AI endpoint (`compile --endpoint`, ENDPOINT_FILE beside it) is
rolled back on the endpoint too, first: all its traffic goes to the deployed model of the
version served after, in one call (endpoint_api.serve_version), before any folder moves,
so a refused call leaves the endpoint and the folder as they were; a version whose deployed
model the lifecycle undeployed is deployed again from its registry version (its
ENDPOINT_FILE then names the new one). The rolled-back deployed models keep no traffic, and
the next push undeploys them."""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import json
import os
import socket

from components.atomic_pusher import endpoint_api
from components.atomic_pusher.lock import push_lock
from components.contract import ENDPOINT_FILE, SAVED_MODEL_FILE
from components.storage import object_store, paths, served_versions
from components.storage.paths import remove_tree


class RollbackError(ValueError):
    """The rollback cannot be done; nothing was changed. The message says why."""


@dataclasses.dataclass(frozen=True)
class EndpointPlan:
    endpoint: str  # the endpoint's resource name
    served_id: str  # the deployed model that gets all the traffic
    rolled_back_ids: list[str]  # the rolled-back versions' deployed models, newest first
    served_ids: dict  # the ENDPOINT_FILE of the version served after
    served_dir: str  # that version's folder


@dataclasses.dataclass(frozen=True)
class Rollback:
    rolled_back: list[str]  # newest first
    served: str  # the version served now
    record: dict


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _targets(serving_model_dir: str, to: str | None) -> tuple[list[str], str]:
    """(versions to take out, newest first; the version served after)."""
    versions = served_versions.complete_versions(serving_model_dir)
    if not versions:
        raise RollbackError(f"{serving_model_dir}: no version is served there")
    if to is None:
        if len(versions) < 2:
            raise RollbackError(
                f"{serving_model_dir}: version {versions[-1]} is the only complete version; "
                "nothing older to serve, so nothing was rolled back"
            )
        to = versions[-2]
    elif to not in versions:
        raise RollbackError(
            f"{serving_model_dir}: no complete version {to} (complete: {', '.join(versions)})"
        )
    elif to == versions[-1]:
        raise RollbackError(f"{serving_model_dir}: version {to} is already the one served")
    return [v for v in reversed(versions) if int(v) > int(to)], to


def _set_aside(serving_model_dir: str, version: str, record: dict) -> None:
    aside = paths.join(serving_model_dir, served_versions.ROLLED_BACK_DIR)
    source, target = paths.join(serving_model_dir, version), paths.join(aside, version)
    spans = served_versions.version_spans(serving_model_dir, version)
    record = {**record, "version": version, "spans": {str(k): v for k, v in spans.items()}}
    if not paths.is_remote(source):
        # whole or not at all (paths.write_bytes): a full disk leaves no partial record
        paths.write_bytes(paths.join(aside, f"{version}.json"), json.dumps(record).encode())
        os.replace(source, target)
        return
    object_store.write_bytes(paths.join(aside, f"{version}.json"), json.dumps(record).encode())
    gfile = object_store.gfile(source)
    for path in paths.walk(source):
        gfile.copy(path, paths.join(target, path[len(source) :].lstrip("/")), overwrite=True)
    gfile.remove(paths.join(source, SAVED_MODEL_FILE))  # the commit point
    remove_tree(source)


def _endpoint_plan(serving_model_dir: str, away: list[str], served: str) -> EndpointPlan | None:
    """The traffic change the rollback makes, or None when no version involved was deployed
    to an endpoint. Refuses (RollbackError) what one traffic change cannot make right."""
    deployed = {
        v: d
        for v in [*away, served]
        if (d := served_versions.version_endpoint(serving_model_dir, v))
    }
    if not deployed:
        return None
    target = deployed.get(served) or {}
    if not target.get("deployed_model_id"):
        version, ids = next(iter(deployed.items()))
        raise RollbackError(
            f"{serving_model_dir}: version {version} was deployed to endpoint {ids['endpoint']}, "
            f"but version {served} records no deployment ({ENDPOINT_FILE}); the endpoint would "
            "serve nothing the folder names, so nothing was rolled back"
        )
    for version in away:
        if version in deployed and deployed[version]["endpoint"] != target["endpoint"]:
            raise RollbackError(
                f"{serving_model_dir}: version {version} was deployed to endpoint "
                f"{deployed[version]['endpoint']}, version {served} to {target['endpoint']}; "
                "a rollback moves one endpoint's traffic, so nothing was rolled back"
            )
    rolled = [deployed[v]["deployed_model_id"] for v in away if v in deployed]
    return EndpointPlan(
        target["endpoint"],
        target["deployed_model_id"],
        rolled,
        target,
        paths.join(serving_model_dir, served),
    )


def _move_traffic(plan: EndpointPlan, api_endpoint: str) -> dict:
    """Sends the endpoint's traffic to the served version's deployed model; the ids it changed,
    for the rollback record."""
    before, serving = endpoint_api.serve_version(plan.served_ids, api_endpoint)
    if serving != plan.served_id:  # deployed again: the version records its new deployment
        paths.write_bytes(
            paths.join(plan.served_dir, ENDPOINT_FILE),
            json.dumps({**plan.served_ids, "deployed_model_id": serving}, indent=1).encode(),
        )
    return {
        "name": plan.endpoint,
        "served_deployed_model_id": serving,
        "rolled_back_deployed_model_ids": plan.rolled_back_ids,
        "traffic_split_before": before,
    }


def roll_back(
    serving_model_dir: str, why: str, to: str | None = None, api_endpoint: str = ""
) -> Rollback:
    """Takes the newest version (or every version newer than `to`) out of service, under the
    push lock, and a Vertex AI endpoint's traffic with them (`api_endpoint` overrides the
    region's API host). Raises RollbackError, having changed nothing, when there is no such
    version or nothing older to serve, and EndpointNotMoved when the endpoint call fails."""
    seen = _targets(serving_model_dir, to)  # bad input refused before the lock file is made
    plan = _endpoint_plan(serving_model_dir, *seen)
    with push_lock(serving_model_dir):
        away, served = _targets(serving_model_dir, to)
        if (away, served) != seen:  # a push committed while this waited for the lock
            raise RollbackError(
                f"{serving_model_dir}: version {away[0]} was pushed while the rollback "
                "waited for the push lock; nothing rolled back (look, then roll back again)"
            )
        record = {
            "who": who(),
            "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "why": why,
            "rolled_back_to": served,
        }
        if plan is not None:  # before any folder moves: a failed call changes nothing
            record["endpoint"] = _move_traffic(plan, api_endpoint)
        for version in away:
            _set_aside(serving_model_dir, version, record)
    return Rollback(away, served, record)
