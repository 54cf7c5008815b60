#!/usr/bin/python3
"""PyTorch training throughput of the reference CNN (same model, SGD, batch and threads as mwstrat_bench_nn).

usage: torch_cnn.py BATCH THREADS [SECONDS]     prints: samples/s
Run with Debian's python3-torch (/usr/bin/python3). Channels-first as PyTorch expects; the model is the tutorial's:
Conv2d(1, 32, 3) + ReLU -> Flatten -> Linear(21632, 128) + ReLU -> Linear(128, 10), cross-entropy from logits.
"""
import sys
import time

import torch

batch, threads = int(sys.argv[1]), int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
torch.set_num_threads(threads)
torch.manual_seed(1)
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(21632, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.001)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.rand(batch, 1, 28, 28)
y = torch.arange(batch) % 10


def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


for _ in range(5):
    step()
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    step()
    steps += 1
elapsed = time.perf_counter() - start
print(f"{steps * batch / elapsed:.1f}")
