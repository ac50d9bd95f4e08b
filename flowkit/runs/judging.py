"""What identifies each model-calling node's judging, so a resume can refuse to mix two judges.

A run records, per node that calls a model, the model it was bound to (and the Azure deployment
its calls go to, which picks the model whatever the label), its params and a hash of its prompt
text (run.json ``"judging"``). A resume binds the flow again with today's
configuration (flowkit.yaml, the environment, the run's own ``--model``) and compares: rows
judged by ``gpt-4o-mini`` and rows judged by ``gpt-4o`` must not be averaged into one metric
without a word. :func:`judging` is the one place that reads a prepared node; :func:`changes`
says what differs, one readable phrase per change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flowkit.engine.bound import BoundFlow
from flowkit.engine.plan import calls_endpoint
from flowkit.errors import UsageError

Judging = dict[str, dict[str, Any]]
"""Qualified node name → its ``model``, ``deployment`` (an Azure connection's, when it pins
one), ``params`` and ``prompt`` (sha256 of the text). A Prompt Flow tool's has, instead of a
deployment, ``connections``: each connection its chat calls may reach (``""``: the default)
→ its ``model`` and ``deployment``, or None where it is not configured."""


def judging(bound: BoundFlow) -> Judging:
    """Each model-calling node of a run's bound flow and what judges with it.

    A node calls a model when its kind calls an endpoint, or when its run's key names the
    model(s) it reaches (a Prompt Flow tool's chat).
    """
    out: Judging = {}
    for node in bound.walk():
        parts = {**node.node.key_parts, **node.run_parts}
        if not calls_endpoint(node) and "model" not in parts and "models" not in parts:
            continue
        entry: dict[str, Any] = _reached(parts.get("models")) or {"model": parts.get("model")}
        if "deployment" in parts:  # an Azure deployment picks the model the calls reach
            entry["deployment"] = parts["deployment"]
        params = getattr(node.spec, "params", None)
        if isinstance(params, dict):
            entry["params"] = _readable_params(params)
        if "prompt" in parts:
            entry["prompt"] = _sha256(parts["prompt"])
        out[node.qual] = entry
    return out


def changes(before: Judging, now: Judging) -> dict[str, list[str]]:
    """Per node whose judging differs, what changed: ``model gpt-4o-mini -> gpt-4o``."""
    out: dict[str, list[str]] = {}
    for node in sorted(before.keys() | now.keys()):
        old, new = before.get(node), now.get(node)
        if old is None:
            out[node] = ["calls a model now and did not in the run"]
            continue
        if new is None:
            out[node] = ["no longer calls a model"]
            continue
        old, new = _normal(old), _normal(new)
        what: list[str] = []
        if old.get("model") != new.get("model"):
            what.append(f"model {old.get('model')} -> {new.get('model')}")
        if old.get("deployment") != new.get("deployment"):
            what.append(
                f"deployment {old.get('deployment') or '(none)'} -> "
                f"{new.get('deployment') or '(none)'}"
            )
        what += _connection_changes(old.get("connections"), new.get("connections"))
        old_params, new_params = old.get("params") or {}, new.get("params") or {}
        for key in sorted(old_params.keys() | new_params.keys()):
            if old_params.get(key, _UNSET) != new_params.get(key, _UNSET):
                what.append(
                    f"param {key} {_shown(old_params.get(key, _UNSET))} -> "
                    f"{_shown(new_params.get(key, _UNSET))}"
                )
        if old.get("prompt") != new.get("prompt"):
            what.append("prompt text changed")
        if what:
            out[node] = what
    return out


def describe(changed: dict[str, list[str]]) -> list[str]:
    """One line per changed node: ``node 'judge': model gpt-4o-mini -> gpt-4o``."""
    return [f"node {node!r}: {', '.join(what)}" for node, what in changed.items()]


def refusal(where: str, flow: str, changed: dict[str, list[str]], cached: bool) -> UsageError:
    """The refusal of a resume whose judging (or, where nothing names it, flow) changed."""
    if changed:
        message = f"{where}: the judging changed since the run; its rows would mix two judges:"
        message += "".join(f"\n  {line}" for line in describe(changed))
    else:
        message = f"{where}: flow {flow!r} changed since the run (nodes, prompts or code)"
    cost = (
        "the cache answering each unchanged node"
        if cached
        else "and, as this run keeps no cache (--no-cache), every node of every row is called again"
    )
    return UsageError(
        message,
        hint=f"a resume must finish what was started; --allow-changes (allow_changes=True) "
        f"reruns every row in this folder, {cost}; or start a new run",
    )


def rerun_notice(flow: str, changed: dict[str, list[str]], cached: bool) -> str:
    """What run.json's notices say of a resume that was allowed changes."""
    what = "; ".join(describe(changed)) if changed else f"flow {flow!r} changed"
    how = (
        "the cache answered each unchanged node"
        if cached
        else "every node was called again (the run keeps no cache)"
    )
    return f"resumed with changes ({what}): every row ran again, {how}"


_UNSET = object()


def _reached(models: Any) -> dict[str, Any] | None:
    """A tool's entry from what its key says it reaches (pfcompat.connections.models_reached)."""
    if not isinstance(models, dict) or not isinstance(models.get("connections"), dict):
        return None
    return {"model": models.get("model"), "connections": dict(models["connections"])}


def _normal(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as this version writes it: a run.json written before a tool's entry named its
    connections held the whole key under ``model``."""
    return {**entry, **(_reached(entry.get("model")) or {})}


def _connection_changes(old: Any, new: Any) -> list[str]:
    """``connection az2: deployment m-b -> m-c``, one phrase per connection and field."""
    old, new = old or {}, new or {}
    what: list[str] = []
    for name in sorted(old.keys() | new.keys()):
        label = f"connection {name or '(default)'}"
        before, now = old.get(name, _UNSET), new.get(name, _UNSET)
        if before is _UNSET or now is _UNSET or before is None or now is None:
            if before != now:
                what.append(f"{label}: {_configured(before)} -> {_configured(now)}")
            continue
        for field in sorted(before.keys() | now.keys()):
            if before.get(field) != now.get(field):
                what.append(
                    f"{label}: {field} {before.get(field) or '(none)'} -> "
                    f"{now.get(field) or '(none)'}"
                )
    return what


def _configured(reached: Any) -> str:
    if reached is _UNSET:
        return "(not reached)"
    if reached is None:
        return "(not configured)"
    return ", ".join(f"{k} {v or '(none)'}" for k, v in sorted(reached.items()))


def _shown(value: Any) -> str:
    return "(unset)" if value is _UNSET else json.dumps(value, sort_keys=True)


def _readable_params(params: dict[str, Any]) -> dict[str, Any]:
    """The params as written, but headers (which may carry keys) only as a hash."""
    shown = {k: v for k, v in params.items() if k != "extra_headers"}
    if "extra_headers" in params:
        text = json.dumps(params["extra_headers"], sort_keys=True, default=str)
        shown["extra_headers"] = "sha256:" + _sha256(text)[:16]
    return json.loads(json.dumps(shown, sort_keys=True, default=str))


def _sha256(text: Any) -> str:
    data = text if isinstance(text, str) else json.dumps(text, sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()
