#!/usr/bin/python3
"""PyTorch's DistributedDataParallel (gloo) on examples/libtorch_mnist's CNN: the peer of libtorch_throughput.

One process per worker, started by compare.py (or by hand) with RANK, WORLD_SIZE and MASTER_PORT in the environment;
gloo over tcp://127.0.0.1. Run with Debian's python3-torch (/usr/bin/python3): the same libtorch 1.13.1 build that
libtorch-dev gives the C++ side, so both run the same kernels and only the distribution layer differs.

  RANK=0 WORLD_SIZE=1 MASTER_PORT=29500 /usr/bin/python3 ddp_throughput.py --data-dir .cache/mnist

The model is the example's module layer for layer (Conv2d(1, 32, 3) + ReLU -> Flatten -> Linear(21632, 128) + ReLU
-> Linear(128, 10)), cross-entropy from logits, SGD(--learning-rate), per-worker batch --batch, torch.set_num_threads
(--threads). Real MNIST kept as bytes, shuffled once with the seed; each worker takes its slice of every global batch
and normalises it to float [0, 1]. The loop is DDP's textbook one (zero_grad, forward, backward, step, loss.item()).
--metrics adds what mwstrat's fit does besides: the loss and the correct count summed over the workers every step
(one small all_reduce). --warmup steps, then --steps timed steps; CPU time is the whole process's (gloo's threads
too), summed over the workers. Rank 0 prints one JSON line with libtorch_throughput's fields.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
import mnist_idx  # noqa: E402


class Cnn(torch.nn.Module):
    """examples/libtorch_mnist/tutorial_cnn.hpp's cnn, with the same parameter names."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3)
        self.fc1 = torch.nn.Linear(32 * 26 * 26, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default=".cache/mnist")
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--metrics", action="store_true", help="sum loss and correct count over the workers every step")
    a = p.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ.get("MASTER_PORT", "29500"))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))

    images, labels = mnist_idx.load_train(a.data_dir)
    x_all = torch.from_numpy(images.copy()).unsqueeze(1)  # uint8 [N, 1, 28, 28]
    y_all = torch.from_numpy(labels.copy())
    global_batch = a.batch * world
    if (a.warmup + a.steps) * global_batch > x_all.shape[0]:
        sys.exit(f"ddp_throughput: --warmup + --steps must fit in one epoch ({x_all.shape[0] // global_batch} steps)")
    order = torch.randperm(x_all.shape[0], generator=torch.Generator().manual_seed(a.seed))

    torch.manual_seed(a.seed)
    ddp = DistributedDataParallel(Cnn())  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(ddp.parameters(), lr=a.learning_rate)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(s):
        lo = s * global_batch + rank * a.batch
        idx = order[lo:lo + a.batch]
        xb = x_all[idx].float().div_(255.0)
        yb = y_all[idx]
        opt.zero_grad()
        logits = ddp(xb)
        loss = loss_fn(logits, yb)
        loss.backward()
        opt.step()
        if not a.metrics:
            return loss.item()
        stats = torch.tensor([loss.item() * a.batch, float((logits.argmax(1) == yb).sum()), float(a.batch)],
                             dtype=torch.float64)
        dist.all_reduce(stats)
        return (stats[0] / stats[2]).item()

    for s in range(a.warmup):
        step(s)
    dist.barrier()  # every worker starts the timed steps together, as fit's lockstep does
    start, cpu_start, times_start = time.perf_counter(), time.process_time(), os.times()
    loss_sum = 0.0
    for s in range(a.warmup, a.warmup + a.steps):
        loss_sum += step(s)
    seconds, cpu_seconds, times_stop = time.perf_counter() - start, time.process_time() - cpu_start, os.times()

    sums = torch.tensor([cpu_seconds, times_stop.user - times_start.user, times_stop.system - times_start.system],
                        dtype=torch.float64)
    dist.all_reduce(sums)
    maxima = torch.tensor([seconds, mnist_idx.peak_rss_mib()], dtype=torch.float64)
    dist.all_reduce(maxima, op=dist.ReduceOp.MAX)
    if rank == 0:
        job = maxima[0].item()
        steps_per_s = a.steps / job
        print(json.dumps({
            "impl": "ddp-metrics" if a.metrics else "ddp", "workers": world, "threads": a.threads, "batch": a.batch,
            "steps": a.steps, "seconds": round(job, 4), "steps_per_s": round(steps_per_s, 3),
            "samples_per_s": round(steps_per_s * global_batch, 1),
            "cpu_s_per_step": round(sums[0].item() / a.steps, 5),
            "cpu_user_s_per_step": round(sums[1].item() / a.steps, 5),
            "cpu_system_s_per_step": round(sums[2].item() / a.steps, 5), "peak_rss_mib": round(maxima[1].item(), 1),
            "loss": round(loss_sum / a.steps, 5), "torch": torch.__version__}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # every figure is out; gloo's teardown adds nothing to measure


if __name__ == "__main__":
    main()
