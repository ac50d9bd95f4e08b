"""Sending chunks of rows to workers and taking them back as they finish, through each
backend's own futures: a lost chunk is sent again, and stopping the driver cancels the rest.

joblib.Parallel can neither send a chunk again when its worker dies nor hand a chunk back
before the ones sent earlier, so each backend is driven through its own futures API:

- ``loky``: one single-process ``ProcessPoolExecutor`` of loky (joblib's process pool) per
  worker, so a worker that dies breaks only its own executor and loses only its own chunk
  (one executor of N processes fails every chunk in flight when one of them dies);
- ``multiprocessing``: the same with the standard library's ``ProcessPoolExecutor``;
- ``threading``: a ``ThreadPoolExecutor``;
- ``dask``: ``Client.submit`` (dask.distributed), whose scheduler itself sends a killed
  worker's tasks to the other workers; each task is released as soon as its result is
  fetched, or Dask would compute a dead worker's finished results again;
- ``ray``: Ray tasks (``ray.remote``), seen as futures through ``ObjectRef.future()``.

A chunk whose worker died (loky's ``TerminatedWorkerError``, Ray's ``WorkerCrashedError`` or
``ActorDiedError``, Dask's ``KilledWorker``) is sent again, up to :data:`RETRIES` times; then the
run stops with :class:`WorkerLost`, keeping the chunks that finished. Any other error of a chunk
is the run's error. Ctrl-C or SIGTERM on the driver cancels what is still out (loky's and the
standard pools' workers are stopped, Dask futures and Ray tasks cancelled) and the finished
chunks are kept.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from flowkit.errors import FlowkitError, UsageError
from flowkit.runs.lease import signals_interrupt

RETRIES = 3
"""How many times a chunk lost to a dead worker is sent again before the run stops."""


class WorkerLost(FlowkitError):
    """A chunk's workers died more often than :data:`RETRIES` allows."""


class Pool:
    """A backend's workers, as futures. ``lost`` says whether an error means the worker died
    (the chunk may run again elsewhere); ``cancel`` stops what is still out; ``close`` ends a
    pool that belongs to this run."""

    def __init__(
        self,
        submit: Callable[..., cf.Future[Any]],
        lost: Callable[[BaseException], bool],
        cancel: Callable[[], None],
        close: Callable[[], None] = lambda: None,
        unwrap: Callable[[BaseException], BaseException] = lambda err: err,
        slots: int | None = None,
    ) -> None:
        self.submit = submit
        self.lost = lost
        self.cancel = cancel
        self.close = close
        self.unwrap = unwrap
        """The error itself, out of a backend's wrapping of a task's error (Ray's)."""
        self.slots = slots
        """Chunks a cluster runs at once (its threads or CPUs); None: ``--workers``."""


class _Processes:
    """One single-process executor per worker: a dead worker breaks only its own executor,
    which is replaced for the chunks that follow. Kept across runs (like joblib's reusable
    executor), so a run after the first starts without new processes."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.executors: list[Any] = []
        self.load: dict[int, int] = {}
        self.lock = threading.Lock()

    def size(self, workers: int) -> None:
        with self.lock:
            while len(self.executors) > workers:
                self.executors.pop().shutdown(wait=False)
            while len(self.executors) < workers:
                self.executors.append(self.make())
            self.load = dict.fromkeys(range(workers), 0)

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future[Any]:
        with self.lock:
            slot = min(self.load, key=lambda i: self.load[i])
            self.load[slot] += 1
            try:
                future: cf.Future[Any] = self.executors[slot].submit(fn, *args)
            except (BrokenProcessPool, RuntimeError):  # its worker died, or it was shut down
                self.executors[slot] = self.make()
                future = self.executors[slot].submit(fn, *args)
        future.add_done_callback(lambda _: self._done(slot))
        return future

    def _done(self, slot: int) -> None:
        with self.lock:
            if slot in self.load:
                self.load[slot] -= 1

    def cancel(self) -> None:
        """Stop every worker now (running chunks included); the next run starts new ones."""
        with self.lock:
            executors, self.executors = self.executors, []
        for executor in executors:
            _stop(executor)


def _stop(executor: Any) -> None:
    if "kill_workers" in executor.shutdown.__code__.co_varnames:  # loky's
        executor.shutdown(wait=False, kill_workers=True)
        return
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:  # the standard pool has no way to stop a running task
        with contextlib.suppress(Exception):
            process.kill()


_pools: dict[str, _Processes] = {}


def _process_pool(backend: str, workers: int) -> Pool:
    if backend not in _pools:
        if backend == "loky":
            from joblib.externals.loky import ProcessPoolExecutor

            # Idle workers leave after 300 s, as joblib's reusable executor's do.
            _pools[backend] = _Processes(lambda: ProcessPoolExecutor(max_workers=1, timeout=300))
        else:
            _pools[backend] = _Processes(lambda: cf.ProcessPoolExecutor(max_workers=1))
    processes = _pools[backend]
    processes.size(workers)
    return Pool(processes.submit, lambda err: isinstance(err, BrokenProcessPool), processes.cancel)


def shutdown_pools() -> None:
    """Stop the process pools kept between runs; the next run starts new workers (which see
    the environment and working directory of that moment)."""
    for processes in _pools.values():
        processes.cancel()


def _thread_pool(workers: int) -> Pool:
    executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flowkit-worker")
    return Pool(
        executor.submit,
        lambda err: False,  # a thread does not die under a chunk
        # A thread cannot be stopped: the chunks running finish (their calls fail at once when
        # the run stopped on a down endpoint) before the run's state in this process is undone.
        lambda: executor.shutdown(wait=True, cancel_futures=True),
        lambda: executor.shutdown(wait=False),
    )


def _dask_pool(scheduler: str | None) -> Pool:
    try:
        from dask.distributed import Client
        from distributed.scheduler import KilledWorker
    except ImportError:
        raise UsageError(
            "--backend dask needs dask[distributed]", hint="pip install 'flowkit[dask]'"
        ) from None
    client = connect_dask(scheduler) if scheduler else Client(processes=True)
    tasks: dict[cf.Future[Any], Any] = {}

    def submit(fn: Callable[..., Any], *args: Any) -> cf.Future[Any]:
        # pure=False: two chunks are never the same task, whatever their arguments.
        task = client.submit(fn, *args, pure=False)
        future: cf.Future[Any] = cf.Future()
        tasks[future] = task
        task.add_done_callback(lambda _: _settle(task, future, tasks))  # a thread of Dask's
        return future

    def cancel() -> None:
        out = list(tasks.items())
        for future, _ in out:
            _cancel(future)
        with contextlib.suppress(Exception):
            client.cancel([task for _, task in out])

    return Pool(
        submit,
        lambda err: isinstance(err, KilledWorker),
        cancel,
        client.close,
        slots=sum(client.nthreads().values()) or None,
    )


_cancelling = threading.Lock()


def _cancel(future: cf.Future[Any]) -> None:
    """Cancel ``future`` and wake whoever waits on it (``cf.wait`` is woken by the notify);
    once only: notified twice (``cancel``, then the Dask task's callback) ``cf.Future`` logs
    "Future … in unexpected state" to the user's terminal."""
    with _cancelling:
        if future.done():
            return
        if future.cancel():
            with contextlib.suppress(RuntimeError):  # notified already
                future.set_running_or_notify_cancel()


def _settle(task: Any, future: cf.Future[Any], tasks: dict[cf.Future[Any], Any]) -> None:
    """A Dask task's outcome into its future, then the task released at once.

    Dask keeps a finished task's result on its worker for as long as a client holds the task,
    and when that worker dies it computes every such result again elsewhere (its scheduler's
    ``remove_worker``: "lost already computed task(s), which will be recomputed"), so a kill
    cost the chunk it was running and the last one it had finished (62 extra calls in 32-row
    chunks, measured). The driver has the result once fetched here, so the task is let go."""
    try:
        if task.status == "cancelled":
            _cancel(future)
        else:
            result = task.result()
            if not future.done():
                future.set_result(result)
    except BaseException as err:
        if not future.done():
            future.set_exception(err)
    finally:
        task.release()
        tasks.pop(future, None)


def _ray_pool(scheduler: str | None, fn: Callable[..., Any]) -> Pool:
    try:
        import ray
        from ray.exceptions import (
            ActorDiedError,
            NodeDiedError,
            ObjectLostError,
            RayTaskError,
            WorkerCrashedError,
        )
    except ImportError:
        raise UsageError("--backend ray needs ray", hint="pip install 'flowkit[ray]'") from None
    connect_ray(scheduler)
    # Ray's own retries are off: a lost chunk is sent again by the loop below, with the same
    # bound as on every backend.
    task = ray.remote(max_retries=0)(fn)
    refs: dict[cf.Future[Any], Any] = {}

    def submit(_fn: Callable[..., Any], *args: Any) -> cf.Future[Any]:
        ref = task.remote(*args)
        future: cf.Future[Any] = ref.future()
        refs[future] = ref
        future.add_done_callback(lambda f: refs.pop(f, None))
        return future

    def cancel() -> None:
        for ref in list(refs.values()):
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)

    def unwrap(err: BaseException) -> BaseException:
        cause = getattr(err, "cause", None)
        return cause if isinstance(err, RayTaskError) and cause is not None else err

    lost = (WorkerCrashedError, ActorDiedError, NodeDiedError, ObjectLostError)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    return Pool(
        submit, lambda err: isinstance(err, lost), cancel, unwrap=unwrap, slots=cpus or None
    )


def connect_dask(scheduler: str) -> Any:
    """A dask.distributed ``Client`` of the scheduler at ``scheduler``. An address that does not
    answer, or answers as something else (the dashboard's port 8787, another server: Dask
    read its reply as a frame of exabytes and died of a MemoryError), is a usage error."""
    from dask.distributed import Client

    try:
        return Client(scheduler, timeout=5)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if not isinstance(err, OSError):  # TimeoutError is one
            first = f"it answers, but not as a Dask scheduler ({type(err).__name__})"
        raise UsageError(
            f"cannot reach the Dask scheduler at {scheduler}: {first}",
            hint="check --scheduler (tcp://HOST:8786, the scheduler's port, not its "
            "dashboard's), or leave it out for a local cluster",
        ) from None


def connect_ray(scheduler: str | None) -> None:
    """Join the Ray cluster at ``scheduler`` (``ray://host:10001`` or ``host:6379``); without
    one, a local Ray, or the cluster ``RAY_ADDRESS`` names. A cluster that answers but refuses
    the driver (a missing auth token, another Ray version) is a usage error naming it, not
    Ray's traceback."""
    try:
        import ray
    except ImportError:
        raise UsageError("--backend ray needs ray", hint="pip install 'flowkit[ray]'") from None
    if ray.is_initialized():
        return
    try:
        ray.init(address=scheduler, ignore_reinit_error=True, log_to_driver=False)
    except Exception as err:  # Ray raises ConnectionError, RuntimeError, its own errors
        where = scheduler or os.environ.get("RAY_ADDRESS") or "a local Ray"
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(
            f"cannot connect to the Ray cluster at {where}: {first}",
            hint="check the cluster's address, its Ray version and, if it uses token "
            "authentication, RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN)",
        ) from None


def open_pool(backend: str, workers: int, scheduler: str | None, fn: Callable[..., Any]) -> Pool:
    """The workers of ``backend`` as a :class:`Pool` (one connection to a cluster per run)."""
    if backend in ("loky", "multiprocessing"):
        return _process_pool(backend, workers)
    if backend == "threading":
        return _thread_pool(workers)
    if backend == "dask":
        return _dask_pool(scheduler)
    if backend == "ray":
        return _ray_pool(scheduler, fn)
    raise UsageError(f"no backend {backend!r}")


def dispatch(
    pool: Pool,
    fn: Callable[..., Any],
    job: Any,
    chunks: Iterator[list[Any]],
    window: int,
    fold: Callable[[Any], None],
) -> None:
    """Run ``fn(job, chunk)`` for every chunk on ``pool``, at most ``window`` chunks out at a
    time and none more than ``2 * window`` chunks ahead of the oldest unfinished one (the run
    folder keeps outputs in input order, so what finished early waits in a bounded buffer);
    ``fold`` each result as it comes back."""
    out: dict[cf.Future[Any], tuple[int, list[Any], int]] = {}
    unfinished: set[int] = set()
    sent = 0
    more = True

    def send(seq: int, chunk: list[Any], tries: int) -> None:
        out[pool.submit(fn, job, chunk)] = (seq, chunk, tries)

    with signals_interrupt():  # SIGTERM cancels the chunks out, as Ctrl-C does
        try:
            while True:
                while (
                    more
                    and len(out) < window
                    and (not unfinished or sent < min(unfinished) + 2 * window)
                ):
                    chunk = next(chunks, None)
                    if chunk is None:
                        more = False
                        break
                    unfinished.add(sent)
                    send(sent, chunk, 0)
                    sent += 1
                if not out:
                    return
                done, _ = cf.wait(out, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    seq, chunk, tries = out.pop(future)
                    try:
                        result = future.result()
                    except Exception as err:
                        if not pool.lost(err):
                            raise pool.unwrap(err) from None
                        if tries >= RETRIES:
                            raise _lost(chunk, tries, err) from err
                        send(seq, chunk, tries + 1)
                        continue
                    unfinished.discard(seq)
                    fold(result)
        except BaseException:
            pool.cancel()
            # Chunks that finished while the others were being cancelled are kept too.
            for future, (seq, _, _) in sorted(out.items(), key=lambda item: item[1][0]):
                if future.done() and not future.cancelled() and future.exception() is None:
                    unfinished.discard(seq)
                    fold(future.result())
            raise
        finally:
            pool.close()


def _lost(chunk: list[Any], tries: int, err: BaseException) -> WorkerLost:
    first, last = chunk[0][0], chunk[-1][0]
    return WorkerLost(
        f"the worker running rows {first}-{last} died {tries + 1} times "
        f"({type(err).__name__}); the rows that finished are kept",
        hint="see why the workers die (memory, a node that crashes the process), "
        "then resume the run",
    )
