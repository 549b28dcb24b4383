"""``python gloo_mean_probe.py PORT``: prints ``averages`` when this torch's gloo averages in a reduce-scatter
(what FSDP asks of it; see ember.plugins.strategies.fsdp.mean_unsupported), ``sums`` when it does not."""

from __future__ import annotations

import sys

import torch.distributed as dist
import torch.multiprocessing as mp


def work(rank: int, port: int) -> None:
    from ember.plugins.strategies.fsdp import mean_unsupported

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        problem = mean_unsupported()
        if rank == 0:
            print("sums" if problem else "averages", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(int(sys.argv[1]),), nprocs=2)
