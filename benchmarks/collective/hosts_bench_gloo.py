#!/usr/bin/python3
"""One rank of PyTorch's Gloo all-reduce timed as mwstrat_bench_hosts times its own (hosts_bench.py starts every
rank, inside scripts/simhosts' simulated hosts or on 127.0.0.1). Run with Debian's python3-torch (/usr/bin/python3).

  RANK=r WORLD_SIZE=n MASTER_ADDR=10.77.0.1 MASTER_PORT=29400 [GLOO_SOCKET_IFNAME=eth0] \
      /usr/bin/python3 hosts_bench_gloo.py [--sizes 4096,11534336:8] [--reps 20]

torch.distributed with the gloo backend, init over tcp://MASTER_ADDR:MASTER_PORT; per buffer size 3 warm-up
all-reduces, then `reps` times a barrier and one all_reduce (float32, sum, in place) timed on rank 0 from the
barrier's return to the all-reduce's. Rank 0 prints "size=<bytes> median_s=<s> min_s=<s> reps=<n>" per size.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4096,11534336")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    for entry in a.sizes.split(","):
        size, _, reps = entry.partition(":")
        size, reps = int(size), int(reps) if reps else a.reps
        data = ((torch.arange(size // 4, dtype=torch.int64) + rank) % 97).to(torch.float32) * 0.01
        times = []
        for r in range(-3, reps):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(data)
            dt = time.perf_counter() - t0
            if r >= 0:
                times.append(dt)
        times.sort()
        if rank == 0:
            print(f"size={size} median_s={times[len(times) // 2]:.9f} min_s={times[0]:.9f} reps={reps}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
