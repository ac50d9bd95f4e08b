"""A run's life: the job, the run folder under ``runs/<run-id>/``, resuming, scale-out.

- ``config``: ``RunConfig``, every option of a run, typed and frozen, from the CLI and
  ``flowkit.run`` to the job, the workers, run.json and a resume.
- ``job``: checks before the folder exists, streaming rows through the engine, aggregating,
  and closing the folder with a true status.
- ``cost``: what the model calls cost, per node and in all, at the list or the batch price.
- ``environment``: the environment variables a run sets, set for it and restored after.
- ``result``: ``RunResult``, what a run returns (rows, ``to_pandas()``, notebook display).
- ``folder``: the run folder (run.json, outputs.jsonl, traces.jsonl, metrics.json) and reading
  it back.
- ``status``: a run's status words, whether a ``running`` run's process is still alive, and
  the claim that lets one resume at a time into a folder.
- ``summary``: what `show` says about the traces, tallied as the run writes them.
- ``stop``: stopping a run that goes on in a worker thread (a kernel interrupt, a cancelled
  ``arun``) as Ctrl-C stops one.
- ``space``: a full disk under the run folder: the space kept in hand to record it.
- ``resume``: keeping the finished rows of an earlier run and rerunning the rest.
- ``judging``: what identifies each model-calling node's judging (model, params, prompt), so a
  resume refuses to mix two judges.
- ``backends``: joblib backends (loky, Dask, Ray) whose workers send results to the driver.
- ``lookup``: the driver's cache lookup before rows go out: rows the cache answers are finished
  on the driver, missed rows go out with the entries found for them.

Imports point down to ``flowkit.engine``, ``flowkit.data``, ``flowkit.flow``, ``flowkit.cache``
and ``flowkit.llm``.
"""
