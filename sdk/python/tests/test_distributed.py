"""The ranks' agreement over a real torch.distributed process group (gloo, two processes on this machine): each
rank reads its own pod's file, as on a multi-node job whose kubelets refresh at different times, and all ranks
answer the same request at the same point. Needs torch (run-tests.sh --with-torch)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from conftest import import_torch_stack

import_torch_stack("torch", "torch.distributed", "torch.multiprocessing")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from kubelet_files import AtomicVolume, request_value  # noqa: E402
from trainwarden import ANNOTATION  # noqa: E402
from trainwarden.checkpoint import CheckpointRequests  # noqa: E402

WORLD = 2


def rank_main(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        volume = AtomicVolume(Path(root) / f"pod-{rank}")
        requests = CheckpointRequests(volume.file, poll_interval=0)
        results: list[str] = []

        def step() -> None:
            request = requests.agree(all_ranks=True)
            results.append(str(request.id) if request is not None else "-")

        volume.write({})
        step()  # nobody has a request
        if rank == 1:
            volume.write({ANNOTATION: request_value(7)})  # only rank 1's kubelet has refreshed yet
        step()
        requests.acknowledge(100)
        results.append(str(requests.metrics()["checkpoint_request_id"]))
        volume.write({ANNOTATION: request_value(7)})  # rank 0's file catches up: answered already
        step()
        volume.write({ANNOTATION: request_value(8 if rank == 0 else 7)})  # a newer one, on rank 0 only
        step()
        requests.acknowledge(200)
        results.append(str(requests.metrics()["checkpoint_request_id"]))
        (Path(root) / f"result-{rank}").write_text(",".join(results))
    finally:
        dist.destroy_process_group()


def test_ranks_agree_on_the_newest_request(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(port, str(tmp_path)), nprocs=WORLD, join=True)
    expected = "-,7,7,-,8,8"
    assert (tmp_path / "result-0").read_text() == expected
    assert (tmp_path / "result-1").read_text() == expected
