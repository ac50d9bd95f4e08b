"""A run's life: the job, the run folder under ``runs/<run-id>/``, resuming, scale-out.

- ``config``: ``RunConfig``, every option of a run, typed and frozen, from the CLI and
  ``flowkit.run`` to the job, the workers, run.json and a resume.
- ``job``: checks before the folder exists, streaming rows through the engine, aggregating,
  and closing the folder with a true status.
- ``cost``: what the model calls cost, per node and in all, at the list or the batch price.
- ``environment``: the environment variables a run sets, set for it and restored after.
- ``result``: ``RunResult``, what a run returns (rows, ``to_pandas()``, notebook display).
- ``folder``: the run folder (run.json, outputs.jsonl, traces.jsonl, metrics.json) and the
  writer that fills it.
- ``status``: a run's status words, whether a ``running`` run still runs (its lease, or for a
  folder from before leases its process), finding a run folder and reading it back, and the
  claim that lets one resume at a time into a folder, from any host.
- ``lease``: who writes a run folder: a lease renewed by a heartbeat, taken over from any host
  once it expires, by one taker at a time; SIGTERM closes a run as interrupted at once, its
  lease released, as Ctrl-C does.
- ``remote``: run folders in an object store (``s3://…`` through fsspec): a staging copy
  uploaded at each heartbeat and at the end, downloaded to read or resume.
- ``summary``: what `show` says about the traces, tallied as the run writes them.
- ``stop``: stopping a run that goes on in a worker thread (a kernel interrupt, a cancelled
  ``arun``) as Ctrl-C stops one.
- ``space``: a full disk under the run folder: the space kept in hand to record it.
- ``resume``: keeping the finished rows of an earlier run and rerunning the rest.
- ``judging``: what identifies each model-calling node's judging (model, params, prompt), so a
  resume refuses to mix two judges.
- ``backends``: workers (loky, threading, multiprocessing, Dask, Ray) that run chunks of rows
  and send their results to the driver, drawing on its endpoint budgets
  (``flowkit.llm.leases``); ``dispatch``: the chunks sent out through each
  backend's own futures, a lost one sent again, all cancelled when the driver stops;
  ``bundle``: the flow (and a ``--target`` app's code) sent to workers by content, packed
  before the run folder exists; ``preflight``: the cluster's address and
  the script's `__main__` guard, checked before the run folder exists.
- ``lookup``: the driver's cache lookup before rows go out: rows the cache answers are finished
  on the driver, missed rows go out with the entries found for them; and the driver's answers
  to the keys workers miss later (a node downstream of one they ran).

Imports point down to ``flowkit.engine``, ``flowkit.data``, ``flowkit.flow``, ``flowkit.cache``
and ``flowkit.llm``.
"""
