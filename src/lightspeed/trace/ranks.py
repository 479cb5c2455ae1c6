"""Many ranks' traces read and analysed by a pool of processes, here or on a Dask
cluster: each rank reduced where it is read, the ranks compared here.

Each worker is forked with its share of the files. It reads them (one process per file,
not the reader's own second process) and sends back each one's rank, its world size and
its ProfilerStep windows. The timeline step all ranks draw is chosen from those windows,
as one process would choose it (`timeline.common_step`); each worker then analyses its
ranks at that step and sends back their analyses (`analysis.portable`: no functions in
them). Here they are put in rank order and compared (`analysis.combine_ranks`). The
result is the one `analyse_traces` gives on the same files read one by one.

The pool is sized by the cores and the memory: no more workers than cores or files, and
no more than the available memory holds at the largest file's estimated need
(`memory_need`: `MEMORY_BASE` and `MEMORY_PER_BYTE` × its size; a gzipped file's
`GZIP_RATIO` times larger).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import SynchronizedArray
from pathlib import Path
from typing import Any, TypeVar

from lightspeed import progress, units
from lightspeed.errors import ConfigError, LightspeedError, TraceError
from lightspeed.trace.analysis import (
    RankAnalysis,
    TraceAnalysis,
    analyse_rank,
    combine_ranks,
    portable,
    restored,
)
from lightspeed.trace.events import Trace
from lightspeed.trace.load import (
    IN_MB,
    can_fork,
    load_trace,
    mb_to_read,
    no_cycle_collection,
    rank_of,
    release_free_memory,
    same_rank,
)
from lightspeed.trace.steps import StepWindow, step_windows
from lightspeed.trace.timeline import common_step

# Peak memory of reading and analysing a trace: a part whatever its size (the interpreter,
# the imports, each step's results) and a part per byte of its JSON, with room
# (docs/benchmarks.md, "Traces at the size users have": peak PSS 126–131 MiB for 100 MB,
# 171 MiB for 100 MB of 9,391 short steps, 761–816 MiB for 1 GB; 1.5 bytes a byte alone
# left the second short).
MEMORY_BASE = 128 * 2**20
MEMORY_PER_BYTE = 1.2
# How much larger a trace's JSON is than its gzip file (Kineto's JSON compresses ~10×).
GZIP_RATIO = 10
# The share of the available memory the pool may plan to use.
MEMORY_SHARE = 0.8


def pool_size(files: Sequence[Path], available_bytes: int | None = None) -> int:
    """How many worker processes read `files`: at most one a core and one a file, and
    no more than `MEMORY_SHARE` of the available memory (`available_bytes`; None: as
    the system reports it) holds at the largest file's need; at least one."""
    if not files:
        return 1
    available = available_memory() if available_bytes is None else available_bytes
    largest = max(_json_bytes(f) for f in files)
    need = memory_need(largest)
    if available is None or not largest:  # the memory, or the files' sizes, unknown
        by_memory = len(files)
    else:
        by_memory = int(MEMORY_SHARE * available // need)
    return max(1, min(os.cpu_count() or 1, len(files), by_memory))


def memory_need(json_bytes: float) -> float:
    """Bytes that reading and analysing `json_bytes` of trace JSON takes at most, by the
    estimate (`MEMORY_BASE` and `MEMORY_PER_BYTE` a byte)."""
    return MEMORY_BASE + json_bytes * MEMORY_PER_BYTE


def available_memory() -> int | None:
    """Bytes of memory available to new work (`MemAvailable`); None where not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(
    files: Sequence[Path], limit_bytes: int | None, given: bool, *, together: bool = True
) -> None:
    """Refuse, in one line and before reading anything, traces that need more than
    `limit_bytes` by the estimate `pool_size` uses: all of `files` `together` (read
    here, every rank is held until the ranks are compared), else the largest (on a
    cluster, one worker's). `given`: the limit is the user's `--max-memory`, not the
    memory the system says is available."""
    if not files or limit_bytes is None:
        return
    largest = max(files, key=_json_bytes)
    json_bytes = sum(map(_json_bytes, files)) if together else _json_bytes(largest)
    need = memory_need(json_bytes)
    if need <= limit_bytes:
        return
    allowed = "--max-memory" if given else "the memory this machine has available"
    what = f"{largest}" if len(files) == 1 or not together else f"these {len(files)} traces"
    raise TraceError(
        f"{what}: reading and analysing takes about {units.size(need)}"
        f" ({units.size(MEMORY_BASE)} and {MEMORY_PER_BYTE:g}× {units.size(json_bytes)} of"
        f" JSON), more than {allowed}"
        f" ({units.size(limit_bytes)}); raise --max-memory, give fewer ranks at once, or"
        " use --executor dask=ADDRESS."
    )


def _json_bytes(path: Path) -> int:
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    return size * GZIP_RATIO if path.name.endswith(".gz") else size


def analyse_in_pool(
    files: Sequence[Path],
    workers: int,
    *,
    include_last_step: bool = False,
    timeline_step: int | None = None,
) -> TraceAnalysis:
    """`files` (each one rank's trace) read and analysed by `workers` forked processes
    (see the module's docstring); the same result as reading them one by one. Forks:
    the caller checks that this process can (`load.can_fork`)."""
    with _forked(files, workers, _worker, include_last_step) as (pipes, counts):
        with _reading_told(files, counts) as tell:
            read = [item for pipe in pipes for item in _awaited(pipe, tell)]
        ranks, timeline_step = _by_rank(read, timeline_step)
        for pipe in pipes:
            pipe.send(timeline_step)
        with _told(lambda: "analysing the ranks", len(files), lambda: counts[_ANALYSED]) as tell:
            analysed = [restored(r) for pipe in pipes for r in _awaited(pipe, tell)]
    by_rank = sorted(analysed, key=lambda r: r.rank)
    return combine_ranks(by_rank, [ranks[r.rank][2] for r in by_rank])


_T = TypeVar("_T")


def map_ranks(
    files: Sequence[Path], fn: Callable[[Trace], _T], workers: int | None = None
) -> list[_T]:
    """`fn` applied to each of `files`' traces (each with its rank, as `load.load_traces`
    gives it), the results in rank order: by `workers` forked processes (default: a
    pool of `pool_size` where there are several files and this process can fork), each
    trace read and reduced where it is read; with one, here, one by one. Two files of
    one rank are refused, as `load_traces` refuses them. What `fn` returns travels back
    from a worker: no functions in it."""
    if workers is None:
        workers = pool_size(files) if len(files) > 1 and can_fork() else 1
    workers = min(workers, len(files))
    if workers < 2:
        done = _mapped(list(enumerate(files)), fn, parallel=None)
    else:
        done = _mapped_in_pool(files, fn, workers)
    ranked: dict[int, tuple[str, _T]] = {}
    for rank, path, result in sorted(done, key=lambda d: d[0]):
        if rank in ranked:
            raise same_rank(ranked[rank][0], path, rank)
        ranked[rank] = (path, result)
    return [result for _, result in ranked.values()]


def _mapped(
    share: Sequence[tuple[int, Path]],
    fn: Callable[[Trace], _T],
    *,
    parallel: bool | None,
    counts: _Counts | None = None,
) -> list[tuple[int, str, _T]]:
    """`fn` of each file of `share` (each with its position), read one at a time
    (`parallel` as `load_trace` takes it) and let go before the next: each rank, path
    and result. Each file done is counted in `counts` (a worker's), as read."""
    done = []
    for position, path in share:
        trace = _load_ranked((position, str(path)), parallel=parallel)
        assert trace.rank is not None
        with no_cycle_collection():
            done.append((trace.rank, trace.path, fn(trace)))
        del trace
        release_free_memory()
        if counts is not None:
            _add(counts, _READ)
    return done


def _mapped_in_pool(
    files: Sequence[Path], fn: Callable[[Trace], _T], workers: int
) -> list[tuple[int, str, _T]]:
    """`map_ranks`' work by `workers` forked processes: each rank, path and result."""
    with (
        _forked(files, workers, _map_worker, fn) as (pipes, counts),
        _reading_told(files, counts) as tell,
    ):
        return [item for pipe in pipes for item in _awaited(pipe, tell)]


# What the workers count as they go, for the parent's progress line: MB read (as
# `load_trace` counts them), traces read, ranks analysed. Shared memory, not the pipes:
# the parent waits on one worker's pipe at a time.
_Counts = SynchronizedArray  # of three int64
_MB, _READ, _ANALYSED = range(3)
# How often the parent, waiting on a worker, tells its progress again (seconds).
_POLL_S = 0.2


@contextlib.contextmanager
def _forked(
    files: Sequence[Path], workers: int, target: Callable[..., None], *args: Any
) -> Iterator[tuple[list[Connection], _Counts]]:
    """`workers` forked processes, each running `target(pipe, pipes, counts, share,
    *args)` on its share of `files` (each with its position); the parent's ends of their
    pipes and the counts they add to (`_MB`, `_READ`, `_ANALYSED`). The pipes are closed,
    and the processes ended, on leaving."""
    context = multiprocessing.get_context("fork")
    shares = [list(enumerate(files))[i::workers] for i in range(workers)]
    ends = [context.Pipe() for _ in shares]
    pipes: list[Connection] = [here for here, _ in ends]
    counts = context.Array("q", 3)
    processes = []
    for share, (_, there) in zip(shares, ends, strict=True):
        process = context.Process(
            target=target, args=(there, pipes, counts, share, *args), daemon=True
        )
        process.start()
        there.close()
        processes.append(process)
    try:
        yield pipes, counts
    finally:
        for pipe in pipes:
            pipe.close()
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()


def _add(counts: _Counts, which: int, units: int = 1) -> None:
    with counts.get_lock():
        counts[which] += units


@contextlib.contextmanager
def _told_from_here(counts: _Counts) -> Iterator[None]:
    """In a worker, while the block runs: nothing drawn from here (the parent draws;
    `progress.detach`), and the MB its reads count (a count in a stage ending `IN_MB`)
    added to `counts[_MB]`."""
    progress.detach()
    seen = 0

    def relay(stages: tuple[str, ...]) -> None:
        nonlocal seen
        count = progress.counted() if stages and stages[-1].endswith(IN_MB) else None
        done = 0 if count is None else count[0]
        if done < seen:  # the next file's count
            seen = 0
        if done > seen:
            _add(counts, _MB, done - seen)
            seen = done

    with progress.listening(relay):
        yield


@contextlib.contextmanager
def _told(
    label: Callable[[], str], total: int, done: Callable[[], int]
) -> Iterator[Callable[[], None]]:
    """A progress stage `label()` counting `done()` of `total` units while the block
    runs. The block gets the function that tells both again, to call while it waits."""
    with progress.stage(label()), progress.counting(total) as advance:
        shown_label, shown_done = label(), 0

        def tell() -> None:
            nonlocal shown_label, shown_done
            text, now = label(), min(done(), total)
            if text != shown_label:
                shown_label = text
                progress.relabel(text)
            if now > shown_done:
                advance(now - shown_done)
                shown_done = now

        yield tell


def _reading_told(
    files: Sequence[Path], counts: _Counts
) -> contextlib.AbstractContextManager[Callable[[], None]]:
    """`_told` of the workers reading `files`: how many are read, and the MB."""
    n = len(files)
    return _told(
        lambda: f"reading: {counts[_READ]} of {n} traces{IN_MB}",
        sum(map(mb_to_read, files)),
        lambda: counts[_MB],
    )


def _awaited(pipe: Connection, tell: Callable[[], None]) -> list[Any]:
    """`_received(pipe)`, telling the progress again while the worker works."""
    while not pipe.poll(_POLL_S):
        tell()
    tell()
    return _received(pipe)


def _send_error(pipe: Connection, exc: Exception) -> None:
    """Send a worker's error to the parent, as itself where it pickles."""
    try:
        pipe.send(("error", exc))
    except Exception:
        pipe.send(("error", LightspeedError(str(exc))))


def _map_worker(
    pipe: Connection,
    parents: list[Connection],
    counts: _Counts,
    share: list[tuple[int, Path]],
    fn: Callable[[Trace], Any],
) -> None:
    """In a worker: read the share's files one at a time, apply `fn` to each, send the
    ranks, paths and results (or the error raised). `parents` and `counts` as `_worker`
    takes them."""
    for end in parents:
        end.close()
    try:
        # A worker is a daemon process, which may not fork the reader's second one.
        with _told_from_here(counts):
            pipe.send(("ok", _mapped(share, fn, parallel=False, counts=counts)))
    except Exception as exc:
        _send_error(pipe, exc)
    finally:
        pipe.close()


# What each rank's reader sends first: its rank, path, world size and step windows.
_StepInfo = tuple[int, str, int | None, list[StepWindow]]


def _by_rank(
    read: list[_StepInfo], timeline_step: int | None
) -> tuple[dict[int, _StepInfo], int | None]:
    """The ranks' first replies by rank, two of one rank refused, and the timeline step
    they all draw (`timeline_step`, or one step every rank recorded)."""
    ranks: dict[int, _StepInfo] = {}
    for info in sorted(read, key=lambda r: r[0]):
        rank, path = info[0], info[1]
        if rank in ranks:
            raise same_rank(ranks[rank][1], path, rank)
        ranks[rank] = info
    if timeline_step is None:
        timeline_step = common_step([info[3] for info in ranks.values()])
    return ranks, timeline_step


def _received(pipe: Connection) -> list[Any]:
    """What a worker sent: its results, or the error it raised, raised here."""
    try:
        kind, payload = pipe.recv()
    except EOFError:
        raise LightspeedError(
            "a trace reader process ended without its result (out of memory?); read fewer"
            " ranks at once, or give the traces one by one."
        ) from None
    if kind == "error":
        raise payload
    result: list[Any] = payload
    return result


def _worker(
    pipe: Connection,
    parents: list[Connection],
    counts: _Counts,
    share: list[tuple[int, Path]],
    include_last_step: bool,
) -> None:
    """In a worker: read the share's files, send each rank and its step windows, wait
    for the timeline step, send each rank's analysis. `parents`: the parent's ends of
    every worker's pipe, copied by the fork, closed here so that the parent closing its
    end is the end of this one's (an error elsewhere stops every worker). What it has
    done is added to `counts` as it goes."""
    for end in parents:
        end.close()
    try:
        with _told_from_here(counts):
            traces = []
            for position, path in share:
                traces.append(_load_ranked((position, str(path))))
                _add(counts, _READ)
            release_free_memory()
            pipe.send(("ok", [_step_info(trace) for trace in traces]))
            timeline_step = pipe.recv()
            analysed = []
            with no_cycle_collection():
                for trace in traces:
                    analysed.append(
                        _portable_analysis(
                            trace, timeline_step=timeline_step, include_last_step=include_last_step
                        )
                    )
                    _add(counts, _ANALYSED)
        pipe.send(("ok", analysed))
    except EOFError:  # the parent stopped waiting
        return
    except Exception as exc:
        _send_error(pipe, exc)
    finally:
        pipe.close()


def dask_address(executor: str) -> str | None:
    """The scheduler address `--executor` names: "dask" (None: a local cluster) or
    "dask=ADDRESS"; refused in one line for anything else."""
    name, _, address = executor.partition("=")
    if name != "dask" or (_ and not address.strip()):
        raise ConfigError(
            f"--executor {executor}: give local (processes on this machine), dask (a local"
            " Dask cluster) or dask=tcp://HOST:PORT (a Dask scheduler)."
        )
    return address.strip() or None


def analyse_on_dask(
    files: Sequence[Path],
    address: str | None = None,
    *,
    workers: int | None = None,
    include_last_step: bool = False,
    timeline_step: int | None = None,
) -> TraceAnalysis:
    """`files` read and analysed on a Dask cluster: the scheduler at `address`, or (None)
    a local cluster of `workers` single-threaded processes (default: `pool_size`). The
    same map as the local pool: each rank read and reduced on a worker, where its trace
    stays between the two passes; the same reduce here. The workers must see the files
    at the same paths (a shared file system)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError(
            "--executor dask needs Dask's distributed scheduler: pip install 'lightspeed[dask]'."
        ) from None
    import logging

    # Its scheduler's and workers' INFO lines (starting, closing) are not the user's news.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster = None
    try:
        if address is None:
            cluster = LocalCluster(
                n_workers=workers or pool_size(files),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
        else:
            client = Client(address, timeout="10s")
    except OSError as exc:
        raise ConfigError(
            f"--executor dask={address}: cannot reach the Dask scheduler ({exc}); give its"
            " address as tcp://HOST:PORT, or --executor dask for a local cluster."
        ) from None
    try:
        loaded = client.map(_load_ranked, list(enumerate(map(str, files))), pure=False)
        ranks, timeline_step = _by_rank(
            _gathered(client, client.map(_step_info, loaded), "reading the traces"),
            timeline_step,
        )
        analysed = _gathered(
            client,
            client.map(
                _portable_analysis,
                loaded,
                timeline_step=timeline_step,
                include_last_step=include_last_step,
                pure=False,
            ),
            "analysing the ranks",
        )
        del loaded
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    by_rank = sorted((restored(r) for r in analysed), key=lambda r: r.rank)
    return combine_ranks(by_rank, [ranks[r.rank][2] for r in by_rank])


def _gathered(client: Any, futures: list[Any], label: str) -> list[Any]:
    """The results of Dask `futures`, in order (the first error raised), with a progress
    stage `label` counting them as they complete."""
    from distributed import as_completed

    with progress.stage(label), progress.counting(len(futures)) as advance:
        for _ in as_completed(futures):
            advance()
    return list(client.gather(futures))


def _load_ranked(position_path: tuple[int, str], parallel: bool | None = False) -> Trace:
    """The trace at the path, with its rank (`load.rank_of`); read as `load_trace` reads
    with `parallel` (by default as on a worker of the pool or of Dask: a daemon process,
    which may not fork the reader's second one)."""
    position, path = position_path
    trace = load_trace(path, parallel=parallel)
    return dataclasses.replace(trace, rank=rank_of(trace, position))


def _step_info(trace: Trace) -> _StepInfo:
    """On a worker: what choosing the timeline step and checking the ranks needs."""
    assert trace.rank is not None
    return trace.rank, trace.path, trace.world_size, step_windows(trace)


def _portable_analysis(
    trace: Trace, *, timeline_step: int | None, include_last_step: bool
) -> RankAnalysis:
    """On a worker: the rank analysed, as it can travel (`analysis.portable`)."""
    return portable(
        analyse_rank(
            trace,
            include_last_step=include_last_step,
            timeline_step=timeline_step,
            parallel=False,
        )
    )
