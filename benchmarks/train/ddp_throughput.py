#!/usr/bin/python3
"""PyTorch DDP training throughput of the tutorial CNN: the same protocol as train_throughput (mwstrat).

One process per worker, started by compare.py (or by hand) with RANK, WORLD_SIZE and MASTER_PORT in the
environment; gloo backend, init over tcp://MASTER_ADDR:MASTER_PORT (MASTER_ADDR: 127.0.0.1 unless set, as
hosts_train.py sets it to the first simulated host; GLOO_SOCKET_IFNAME then names the interface). Run with Debian's python3-torch (/usr/bin/python3).

  RANK=0 WORLD_SIZE=1 MASTER_PORT=29500 /usr/bin/python3 ddp_throughput.py --data-dir .cache/mnist

Model (channels-first, as PyTorch expects): Conv2d(1, 32, 3) + ReLU -> Flatten -> Linear(21632, 128) + ReLU ->
Linear(128, 10); cross-entropy from logits; SGD lr 0.001; per-worker batch 64; torch.set_num_threads(--threads).
Data: real MNIST kept as bytes, shuffled per epoch with the seed, each worker taking its slice of every global batch
and normalising it to float [0, 1]. --warmup steps, then --steps timed steps (clock read after the last warm-up step
and after the last step, as mwstrat's timer does). Rank 0 prints one JSON line like train_throughput's.
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_idx  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default=".cache/mnist")
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ.get("MASTER_PORT", "29500"))
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))

    images, labels = mnist_idx.load_train(a.data_dir)
    x_all = torch.from_numpy(images.copy()).unsqueeze(1)  # uint8 [N, 1, 28, 28]
    y_all = torch.from_numpy(labels.copy())
    global_batch = a.batch * world
    if (a.warmup + a.steps) * global_batch > x_all.shape[0]:
        sys.exit(f"ddp_throughput: --warmup + --steps must fit in one epoch ({x_all.shape[0] // global_batch} steps)")
    order = torch.randperm(x_all.shape[0], generator=torch.Generator().manual_seed(a.seed))  # epoch 0

    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(21632, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(ddp.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()

    loss_sum = torch.zeros(2, dtype=torch.float64)  # [sum of losses × examples, examples]

    def step(s):
        lo = s * global_batch + rank * a.batch
        idx = order[lo:lo + a.batch]
        xb = x_all[idx].float().div_(255.0)
        yb = y_all[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xb), yb)
        loss.backward()
        opt.step()
        # Like mwstrat's fit and Keras's, a globally reduced loss every step.
        stats = torch.tensor([loss.item() * a.batch, float(a.batch)], dtype=torch.float64)
        dist.all_reduce(stats)
        loss_sum.add_(stats)

    for s in range(a.warmup):
        step(s)
    if a.warmup == 0:
        dist.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for s in range(a.warmup, a.warmup + a.steps):
        step(s)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    job = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(job, op=dist.ReduceOp.MAX)
    slots = torch.zeros(2 * world, dtype=torch.float64)  # peak RSS and CPU seconds per worker, one-hot, summed
    slots[rank], slots[world + rank] = mnist_idx.peak_rss_mib(), cpu_seconds
    dist.all_reduce(slots)
    rss, cpu_total = slots[:world], slots[world:].sum().item()
    if rank == 0:
        steps_per_s = a.steps / job.item()
        print(json.dumps({
            "impl": "torch-ddp", "workers": world, "threads": a.threads, "batch": a.batch, "steps": a.steps,
            "seconds": round(job.item(), 4), "steps_per_s": round(steps_per_s, 3),
            "samples_per_s": round(steps_per_s * global_batch, 1), "peak_rss_mib": round(max(rss.tolist()), 1),
            "peak_rss_mib_per_worker": [round(v, 1) for v in rss.tolist()],
            "cpu_s_per_step": round(cpu_total / a.steps, 5), "loss": round((loss_sum[0] / loss_sum[1]).item(), 5),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "torch": torch.__version__}),
            flush=True)
    # Every figure is in (all-reduced above). gloo's destroy_process_group now and then never returns on one rank
    # across simulated hosts (2 hosts x 2: one rank of four hung until killed), so leave without it, all at once.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
