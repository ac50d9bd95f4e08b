"""``RunConfig``: every option of a run, typed, in one frozen model.

The CLI builds one from its flags, ``flowkit.run``/``arun`` from their keyword arguments; the
job, the scale-out workers and the resume read it; run.json keeps it under ``"config"``
(``model_dump(mode="json")``) so a resume reads back exactly what the run was given. What cannot
be written down (a settings object, a progress callback) travels beside it, never inside.

Adding an option: a field here, its flag in ``flowkit/cli/main.py`` (and its keyword in
``flowkit.api.run``, which a test keeps in step with these fields), and the line that uses it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator
from pydantic import ValidationError as PydanticError

from flowkit.engine.context import RunOptions
from flowkit.errors import UsageError

Backend = Literal["local", "loky", "threading", "multiprocessing", "dask", "ray"]
Trace = Literal["full", "compact"]
BatchFallback = Literal["none", "online"]


class RunConfig(BaseModel):
    """How a run was asked to run: everything but the flow, the data and live objects."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mapping: dict[str, str] | None = None
    """Flow input name → ``${data.col}``, ``${run.outputs.x}`` or a literal; None maps by name."""
    prior_run: str | None = None
    """The earlier run (folder or name) whose outputs ``${run.outputs.x}`` reads."""
    concurrency: int = Field(16, ge=1, strict=True)
    """Rows in flight at once, and each endpoint's requests in flight unless it sets its own."""
    limit: int | None = Field(None, ge=0, strict=True)
    """Run only the first N rows."""
    use_cache: bool = Field(True, strict=True)
    """Read and write the node cache."""
    refresh: tuple[str, ...] = ()
    """Nodes to recompute although the cache holds them."""
    cache_dir: str | None = None
    """Where the cache lives; None is the default (FLOWKIT_CACHE_DIR or the user cache)."""
    output: str | None = None
    """The run folder to write; None makes one under ``runs_root``."""
    name: str | None = None
    """The run's name (its folder under ``runs_root``)."""
    runs_root: str = "runs"
    """Where run folders are made and run names are looked up."""
    model: str | None = Field(None, min_length=1)
    """Chat model for llm nodes that pin none."""
    connection: str | None = Field(None, min_length=1)
    """Connection (from flowkit.yaml) for llm nodes that pin none."""
    embedding_model: str | None = Field(None, min_length=1)
    """Embeddings model for embedding nodes that pin none."""
    timeout: float | None = Field(None, gt=0, strict=True)
    """Seconds per model request; None keeps the connection's setting."""
    backend: Backend = "local"
    """Where rows run: this process, or workers of a backend (docs/scale-out.md)."""
    workers: int = Field(2, ge=1, strict=True)
    """Worker processes or threads of loky, multiprocessing, threading (a Dask or Ray cluster
    runs a chunk on each of its threads or CPUs)."""
    scheduler: str | None = None
    """The Dask scheduler or Ray cluster address, with backend dask or ray."""
    chunk_size: int | None = Field(None, ge=1, strict=True)
    """Rows sent to a worker at a time, with a backend other than local; None: 32 for a flow
    that calls a model, 512 for a python-only one (flowkit.runs.backends.chunk_rows)."""
    strict: bool = Field(False, strict=True)
    """Read every data row first and stop before running if any is bad."""
    target: str | None = Field(None, min_length=1)
    """An app (``module:function`` or an app flow) called per row, whose answers are judged."""
    overwrite: bool = Field(False, strict=True)
    """Replace the run files of an existing run folder."""
    trace: Trace = "compact"
    """What traces.jsonl keeps: everything, or python nodes' successes without their inputs."""
    environment: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    """Environment variables set for the run (and restored after); in python nodes' keys."""
    batch: bool = Field(False, strict=True)
    """Send llm calls the cache does not answer through the provider's batch API (docs/batch.md)."""
    batch_fallback: BatchFallback = "none"
    """A call no batch answered within the retry limit: fail its node, or ask it online."""

    @model_validator(mode="after")
    def _batch_runs_here(self) -> RunConfig:
        # The collector sees every row of the run at once: rows spread over workers would each
        # send their own batches, and a wave would be cut into as many.
        if self.batch and self.backend != "local":
            raise ValueError(f"batch mode runs with backend local, not {self.backend!r}")
        return self

    @model_validator(mode="after")
    def _scheduler_needs_a_cluster(self) -> RunConfig:
        # An address the local (or loky, threading) backend would never use: a run that was
        # meant for a cluster must not quietly run here instead.
        if self.scheduler is not None and self.backend not in ("dask", "ray"):
            raise ValueError(
                f"scheduler {self.scheduler!r} goes with backend dask or ray, not {self.backend!r}"
            )
        return self

    @classmethod
    def of(cls, **options: Any) -> RunConfig:
        """A config from keyword options, a bad one a usage error naming each option."""
        try:
            return cls(**options)
        except PydanticError as err:
            problems = [
                f"{e['loc'][0]}: no such run option"
                if e["type"] == "extra_forbidden"
                else f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].lower()}, not {e['input']!r}"
                if e["loc"]
                else str(e["ctx"]["error"])  # a rule over several options says it all
                for e in err.errors()
            ]
            raise UsageError("bad run option " + "; ".join(problems)) from None

    def run_options(self) -> RunOptions:
        """What the engine reads while rows run (none of it enters a cache key)."""
        return RunOptions(
            concurrency=self.concurrency,
            use_cache=self.use_cache,
            refresh=frozenset(self.refresh),
            timeout=self.timeout,
        )

    @property
    def worker_count(self) -> int:
        """Processes the rows run in: ``workers``, or 1 for the local backend."""
        return self.workers if self.backend != "local" else 1


def recorded_config(info: dict[str, Any]) -> RunConfig:
    """The options a run was started with, from its run.json (also one written by flowkit
    0.1.0, before ``"config"`` was recorded)."""
    if "config" in info:
        if not isinstance(info["config"], dict):
            raise UsageError(
                "run.json is damaged: its config is not a mapping, so the run cannot be resumed",
                hint="start a new run",
            )
        return RunConfig.of(**info["config"])
    return legacy_config(info)


def legacy_config(info: dict[str, Any]) -> RunConfig:
    """The config of a run.json written before ``"config"`` was (flowkit 0.1.0): read from its
    ``"options"`` and ``"invocation"``, so those runs can still be resumed."""
    opts, inv = info.get("options") or {}, info.get("invocation") or {}
    known = {
        "mapping": inv.get("mapping") or None,
        "prior_run": inv.get("prior_run"),
        "concurrency": opts.get("concurrency"),
        "limit": opts.get("limit"),
        "use_cache": opts.get("cache"),
        "refresh": opts.get("refresh"),
        "cache_dir": inv.get("cache_dir"),
        "name": info.get("name"),
        "model": inv.get("model"),
        "connection": inv.get("connection"),
        "embedding_model": inv.get("embedding_model"),
        "timeout": inv.get("timeout"),
        "backend": opts.get("backend"),
        # 0.1.0 wrote 1 for the local backend, which has no workers to count.
        "workers": opts.get("workers") if opts.get("backend", "local") != "local" else None,
        "scheduler": inv.get("scheduler"),
        "chunk_size": inv.get("chunk_size"),
        "target": inv.get("target"),
        "trace": opts.get("trace"),
    }
    return RunConfig.of(**{k: v for k, v in known.items() if v is not None})
