"""Many GPUs, one sweep: the Dask side of a sharded capture (``nsightlab capture --gpus`` / ``--scheduler``).

A sweep is a bag of independent cases. The capture (nsightlab.run.capture) plans them into shards here, one
Dask task per shard, each running its cases on its worker's GPU; the workers come from

- ``--gpus all|0,2,3``: dask-cuda's ``LocalCUDACluster``, one worker per GPU, each with ``CUDA_VISIBLE_DEVICES``
  pinned to its GPU (where dask-cuda is not installed, the same cluster from distributed's own ``SpecCluster``
  of nannies, each with its ``CUDA_VISIBLE_DEVICES``);
- ``--scheduler ADDRESS`` / ``--scheduler-file FILE``: any running Dask cluster (dask-jobqueue's ``SLURMCluster``
  of one-GPU workers, ``dask-cuda-worker`` on several nodes, ...).

What is here: which GPUs this machine has (``nvidia-smi``), ``--gpus`` read against them, the refusal of GPUs of
different models, connecting to or starting the cluster (one clear line when that fails), each worker's GPU
(index and UUID), the cost estimate of a case (its work model x its replay passes) and the longest-first
balancing of cases into shards. No torch, no profiler: those run in the shard tasks.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: how long joining a running scheduler may take before it counts as unreachable (seconds)
CONNECT_TIMEOUT = 15.0
#: how many times a shard whose task raised is run again (on any worker); a worker that dies under a shard is
#: Dask's ``distributed.scheduler.allowed-failures`` (its default: 3) before the shard counts as failed
RETRIES = 2


class ClusterError(ValueError):
    """Bad input about GPUs or the cluster (an unknown GPU index, mixed models, an unreachable scheduler): one line."""


# --------------------------------------------------------------------------- the GPUs of this machine


def local_gpus() -> list[dict[str, Any]]:
    """This machine's GPUs as ``nvidia-smi`` lists them: ``[{"index", "uuid", "name"}]`` (empty where it is not
    found or says nothing)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,uuid,name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) == 3 and parts[0].isdigit():
            gpus.append({"index": int(parts[0]), "uuid": parts[1], "name": parts[2]})
    return gpus


def _listing(gpus: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{g['index']} ({g['name']})" for g in gpus) or "none"


def parse_gpus(text: str, gpus: Sequence[dict[str, Any]]) -> list[int]:
    """``--gpus``: ``all`` or comma-separated indexes of ``gpus`` (this machine's, :func:`local_gpus`); the indexes
    chosen, in order. ClusterError in one line for an index this machine does not have, a repeated one or text
    that is no index."""
    known = [g["index"] for g in gpus]
    if not gpus:
        raise ClusterError(f"--gpus {text}: this machine has no GPU that nvidia-smi lists; run the capture on the "
                           "GPU node, or join a cluster with --scheduler ADDRESS / --scheduler-file FILE")
    if text.strip() == "all":
        return known
    chosen = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit():
            raise ClusterError(f"--gpus {text}: {part!r} is not a GPU index; accepted: all, or indexes like 0,2,3 "
                               f"(this machine's GPUs: {_listing(gpus)})")
        if int(part) not in known:
            raise ClusterError(f"--gpus {text}: there is no GPU {part} on this machine; its GPUs: {_listing(gpus)}")
        if int(part) in chosen:
            raise ClusterError(f"--gpus {text}: GPU {part} is given twice")
        chosen.append(int(part))
    return chosen


def check_models(gpus: Sequence[dict[str, Any]], allow_mixed: bool) -> None:
    """ClusterError naming the models unless every GPU of ``gpus`` is the same model (or ``allow_mixed``)."""
    models: dict[str, list[str]] = {}
    for g in gpus:
        models.setdefault(str(g.get("name")), []).append(str(g.get("index")))
    if len(models) > 1 and not allow_mixed:
        said = "; ".join(f"{name} (GPU {', '.join(idx)})" for name, idx in models.items())
        raise ClusterError(f"the GPUs are of different models: {said}. A capture's counters and times are one model's: "
                           "choose GPUs of one model with --gpus, or give --allow-mixed (each case records its GPU)")


def worker_gpu() -> dict[str, Any]:
    """The GPU this process may use: the first of ``CUDA_VISIBLE_DEVICES`` (an index or a UUID, as dask-cuda and
    Slurm set it), matched against :func:`local_gpus`; ``{"index", "uuid", "name", "host"}``. Where nothing
    pins it, the first GPU; where nvidia-smi says nothing, index, UUID and name are None."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    gpus = local_gpus()
    first = visible[0] if visible else None
    match = next((g for g in gpus if first is None or str(g["index"]) == first or g["uuid"] == first
                  or g["uuid"].startswith(first)), None)
    return {"index": match["index"] if match else None, "uuid": match["uuid"] if match else None,
            "name": match["name"] if match else None, "host": socket.gethostname()}


def die_with_parent() -> None:
    """``preexec_fn`` of a profiler started on a worker: the child gets SIGTERM when the worker thread that started
    it dies (a worker killed mid-shard leaves no ncu behind to hold its GPU). Linux only; elsewhere nothing."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Where:
    """Where a sharded capture runs: GPUs of this machine (``gpus``), or a running scheduler (``address`` or
    ``scheduler_file``). ``processes`` False: workers are threads of this process (tests, and the report's pages)."""

    gpus: tuple[int, ...] = ()
    address: str | None = None
    scheduler_file: str | None = None
    timeout: float | None = None  # None: CONNECT_TIMEOUT

    def describe(self) -> str:
        if self.address:
            return f"scheduler {self.address}"
        if self.scheduler_file:
            return f"scheduler of {self.scheduler_file}"
        return f"GPU{'s' if len(self.gpus) > 1 else ''} {','.join(map(str, self.gpus))} of this machine"

    def to_json(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "address": self.address, "scheduler_file": self.scheduler_file}


def join(address: str | None = None, scheduler_file: str | None = None, timeout: float | None = None) -> Any:
    """A ``distributed.Client`` of a running scheduler; ClusterError in one line when it cannot be reached within
    ``timeout`` seconds (default :data:`CONNECT_TIMEOUT`)."""
    from distributed import Client

    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    flag = f"--scheduler {address}" if address else f"--scheduler-file {scheduler_file}"
    if scheduler_file and not os.path.isfile(scheduler_file):
        raise ClusterError(f"{flag}: no such file (a scheduler started with --scheduler-file FILE writes it; or give "
                           "--scheduler ADDRESS)")
    try:
        if address:
            return Client(address, timeout=timeout)
        return Client(scheduler_file=scheduler_file, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        raise ClusterError(f"{flag}: the scheduler cannot be reached within {timeout:.0f} s "
                           f"({type(exc).__name__}{': ' + text[0][:200] if text else ''})") from None


def _pinned_cluster(gpus: Sequence[int]) -> Any:
    """One nanny-managed worker process per GPU, each with ``CUDA_VISIBLE_DEVICES`` pinned (first its own GPU,
    then the others, as dask-cuda sets it): distributed's SpecCluster, for machines without dask-cuda."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {}
    for i, gpu in enumerate(gpus):
        order = [*gpus[i:], *gpus[:i]]
        workers[f"gpu{gpu}"] = {"cls": Nanny, "options": {
            "nthreads": 1, "name": f"gpu{gpu}", "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, order))}}}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                       silence_logs=40)


def local_gpu_cluster(gpus: Sequence[int]) -> Any:
    """dask-cuda's ``LocalCUDACluster`` over ``gpus`` (one single-threaded worker per GPU), else :func:`_pinned_cluster`."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        return _pinned_cluster(gpus)
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)), threads_per_worker=1,
                            dashboard_address=":0", silence_logs=40)


@contextmanager
def client_for(where: Where) -> Iterator[Any]:
    """A ``distributed.Client`` for ``where``: a local GPU cluster started (and closed after) or a running one joined
    (left running after: only this client is closed)."""
    from distributed import Client

    if where.address or where.scheduler_file:
        client = join(where.address, where.scheduler_file, where.timeout)
        try:
            yield client
        finally:
            client.close()
        return
    cluster = local_gpu_cluster(where.gpus)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def workers_gpus(client: Any, identify: Callable[[], dict[str, Any]] = worker_gpu) -> dict[str, dict[str, Any]]:
    """Worker address -> its GPU (:func:`worker_gpu`, or ``identify``), every worker of the cluster asked at once.
    ClusterError where the cluster has no worker."""
    addrs = sorted(client.scheduler_info(n_workers=-1)["workers"]) if _takes_n_workers(client) else \
        sorted(client.scheduler_info()["workers"])
    futures = {a: client.submit(identify, workers=[a], allow_other_workers=False, pure=False, key=f"which-gpu-{a}")
               for a in addrs}
    gpus = dict(zip(futures, client.gather(list(futures.values())), strict=True))
    if not gpus:
        raise ClusterError("the cluster has no worker (start workers first: dask-cuda-worker, or a SLURMCluster's "
                           "cluster.scale(N))")
    return dict(sorted(gpus.items(), key=lambda kv: (str(kv[1].get("host")), kv[1].get("index") is None,
                                                     kv[1].get("index") or 0, kv[0])))


def _takes_n_workers(client: Any) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


# --------------------------------------------------------------------------- cost and balance

#: what a case costs under a profiler, in seconds of a pass, beside its work: the launch, the save and restore of its
#: memory, ncu's per-pass bookkeeping (kernel replay: about 0.15 s a pass a kernel on an H200); a guess that only
#: needs to rank cases
PASS_OVERHEAD_S = 0.15
#: nominal rates that turn a case's work model into seconds of one pass (ranking only: the ratio of the cases'
#: costs is what balances, not the seconds)
NOMINAL_FLOP_PER_S = 300e12
NOMINAL_BYTES_PER_S = 2e12
#: replay passes a case costs per tier when nothing better is known: the light tier's metrics take a handful,
#: the deep tier's sections about forty, a timeline run one per measured launch
PASSES = {"ncu": 5, "deep": 40, "nsys": 1}


def case_cost(model: dict[str, Any] | None, passes: int) -> float:
    """The estimated cost of one case: ``passes`` x (its work model's time at nominal rates + a fixed overhead)."""
    model = model or {}
    flop = float(model.get("flop") or 0.0)
    moved = float(model.get("bytes") or 0.0)
    seconds = max(flop / NOMINAL_FLOP_PER_S, moved / NOMINAL_BYTES_PER_S)
    if not math.isfinite(seconds):
        seconds = 0.0
    return passes * (PASS_OVERHEAD_S + seconds)


@dataclass
class Item:
    """What a shard can hold: one light-tier case (``divisible`` work), or a whole step that must stay in one
    process and one report (the timeline, the benchmark, the deep tier)."""

    kind: str  # "ncu" (one case), "nsys", "bench", "deep" (whole steps)
    ranges: list[str]
    cost: float


@dataclass
class Shard:
    """A group of cases one Dask task runs on one GPU, in one process per step."""

    index: int
    items: list[Item] = field(default_factory=list)

    @property
    def cost(self) -> float:
        return sum(i.cost for i in self.items)

    def ranges(self, kind: str) -> list[str]:
        return [r for i in self.items if i.kind == kind for r in i.ranges]

    def has(self, kind: str) -> bool:
        return any(i.kind == kind for i in self.items)


def balance(items: Sequence[Item], shards: int, first_index: int = 0) -> list[Shard]:
    """``items`` packed into at most ``shards`` shards, longest first onto the least loaded (LPT: within 4/3 of the
    best possible largest shard); the shards returned longest first, each with its cases in the sweep's order,
    empty ones left out. Ties keep the items' order, so the same plan comes out every time."""
    bins = [Shard(first_index + k) for k in range(max(1, shards))]
    order = sorted(range(len(items)), key=lambda i: (-items[i].cost, i))
    for i in order:
        target = min(bins, key=lambda b: (b.cost, b.index))
        target.items.append(items[i])
    for b in bins:  # back into the sweep's order inside each shard
        b.items.sort(key=lambda it: items.index(it))
    full = [b for b in bins if b.items]
    full.sort(key=lambda b: (-b.cost, b.index))
    for k, b in enumerate(full):
        b.index = first_index + k
    return full


def anchored(ranges: Sequence[str]) -> str:
    """A regex that matches exactly these range names (the workload's ``--only`` for a shard)."""
    import re

    return "^(?:" + "|".join(re.escape(r) for r in ranges) + ")$"
