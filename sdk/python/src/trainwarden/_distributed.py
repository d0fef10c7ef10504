"""The one collective the package makes: the ranks of a torch.distributed job agree on the request to answer.

Each pod reads its own downward-API file and the kubelets of different nodes refresh them at different times, so
ranks that decided alone would save at different steps (and deadlock where saving is itself collective: FSDP,
DeepSpeed). An all-reduce MAX of the newest request id each rank sees gives every rank the same answer; ids only
grow, so the maximum is the newest request any pod has seen.

torch is never imported here: if the training code has not imported it, no process group can exist.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["is_distributed", "max_across_ranks", "rank"]

_log = logging.getLogger("trainwarden")
_warned_backends: set[str] = set()


def _dist() -> Any | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def is_distributed() -> bool:
    """Whether a torch.distributed process group with more than one rank is initialized."""
    dist = _dist()
    return dist is not None and int(dist.get_world_size()) > 1


def rank() -> int:
    """This process's global rank (0 outside torch.distributed)."""
    dist = _dist()
    return int(dist.get_rank()) if dist is not None else 0


def max_across_ranks(value: int) -> int:
    """The maximum of `value` over all ranks (a collective: every rank must call it), or `value` itself outside
    a multi-rank process group or on a backend this module cannot place a tensor for (warned once)."""
    dist = _dist()
    if dist is None or int(dist.get_world_size()) <= 1:
        return value
    torch = sys.modules["torch"]
    backend = str(dist.get_backend())
    if "gloo" in backend or "mpi" in backend:
        device = torch.device("cpu")  # cheapest: no device synchronisation
    elif "nccl" in backend and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        if backend not in _warned_backends:
            _warned_backends.add(backend)
            _log.warning(
                "trainwarden: cannot agree on checkpoint requests over the %r backend; each rank decides from "
                "its own pod's file",
                backend,
            )
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())
