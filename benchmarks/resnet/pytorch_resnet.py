#!/usr/bin/python3
"""PyTorch's peer of mwstrat's ResNet on CIFAR-10: TensorFlow's official Keras resnet_cifar_model, in PyTorch.

Run with Debian's python3-torch (/usr/bin/python3). Either as the launcher of N local workers:

  /usr/bin/python3 benchmarks/resnet/pytorch_resnet.py --workers 2 --depth 56 --batch 128 --threads 1

or one process per worker with RANK, WORLD_SIZE and MASTER_PORT in the environment (as benchmarks/train/compare.py
starts its peers); DDP over gloo, init on tcp://127.0.0.1:MASTER_PORT. Two modes:

  throughput (default)  --warmup steps, then --steps timed steps; rank 0 prints one JSON line (samples_per_s ...)
  --time-to-accuracy    --epochs full passes with --schedule; after each (each --validation-freq-th), the test
                        accuracy; rank 0 prints one JSON line per evaluated epoch with the wall time so far
                        (training + evaluation, from the first step)

Model (resnet_cifar_model, depth = 6n + 2): ZeroPadding2D(1) + Conv2D(16, 3×3, valid) + BN + ReLU; three stages of
n blocks with 16, 32, 64 filters (strides 1, 2, 2); every block conv3×3-BN-ReLU-conv3×3-BN + shortcut, ReLU; the
first block of each stage has a 1×1 convolution + BN projection shortcut (with the stage's stride), the others the
identity; global average pooling; Dense(10) (softmax in the loss). Convolutions have biases; BN momentum 0.997 (PyTorch
momentum 0.003) and epsilon 1e-5; he_normal kernels (truncated normal, as Keras draws it), Dense kernel N(0, 0.01)
(tf_resnet.py's; --fc-init he_normal draws it as mwstrat's resnet_cifar does, after TF's 2018 resnet_cifar_model:
its first loss is near 4, not ln 10), biases 0; L2 2e-4 on every kernel and bias (Keras's loss += λ·Σw², i.e. SGD
weight decay 2λ on those tensors, none on BN). A strided 3×3 'same' convolution pads as Keras does (bottom/right
only; --padding symmetric pads 1 all round).
SGD momentum 0.9 (--nesterov), the loss's --label-smoothing, learning rate --lr (for the global batch), piecewise 0.1/0.01/0.001 at epochs 30 and
45 (scaled to --epochs) or linear warm-up + cosine.

Data: the real CIFAR-10 binary batches (scripts/fetch-cifar10), kept as bytes; each epoch one global order from
(seed, epoch), worker w takes its contiguous slice of every global batch (as mwstrat's data sharding does); training
examples get the tutorial's augmentation (4-pixel zero pad, random 32×32 crop, random horizontal flip) and per-image
standardization, test examples the standardization only.
"""
import argparse
import datetime
import faulthandler
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

L2 = 2e-4
BN_MOMENTUM = 1.0 - 0.997
BN_EPSILON = 1e-5


# --- data -------------------------------------------------------------------------------------------------------

def read_batches(data_dir, names):
    """(images uint8 [N, 32, 32, 3] HWC, labels int64 [N]) from official CIFAR-10 binary batch files."""
    base = os.path.join(data_dir, "cifar-10-batches-bin")
    if not os.path.isdir(base):
        base = data_dir
    images, labels = [], []
    for name in names:
        path = os.path.join(base, name)
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size != 10000 * 3073:
            sys.exit(f"pytorch_resnet: {path} holds {raw.size} bytes, not 10000 records of 3073 "
                     "(run scripts/fetch-cifar10)")
        rec = raw.reshape(10000, 3073)
        if rec[:, 0].max() >= 10:
            sys.exit(f"pytorch_resnet: {path}: record {int(np.argmax(rec[:, 0] >= 10))} has a label >= 10")
        labels.append(rec[:, 0].astype(np.int64))
        images.append(rec[:, 1:].reshape(10000, 3, 32, 32).transpose(0, 2, 3, 1))
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels)


def standardize(x):
    """tf.image.per_image_standardization per image of x (float [B, C, H, W] in [0, 1]). TensorFlow standardizes the
    uint8 values cast to float (0..255): its floor 1/sqrt(N) is 1/(255·sqrt(N)) here."""
    n = x[0].numel()
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    std = x.var(dim=(1, 2, 3), unbiased=False, keepdim=True).sqrt().clamp_min(1.0 / (255.0 * math.sqrt(n)))
    return (x - mean) / std


def augment(xb, gen):
    """Pad 4 with zeros, random 32×32 crop, random horizontal flip; xb uint8 [B, 32, 32, 3] -> float [B, 3, 32, 32]."""
    b = xb.shape[0]
    x = xb.permute(0, 3, 1, 2).float().div_(255.0)
    padded = F.pad(x, (4, 4, 4, 4))
    offsets = torch.randint(0, 9, (b, 2), generator=gen)
    flips = torch.randint(0, 2, (b,), generator=gen).bool()
    out = torch.empty_like(x)
    for i in range(b):
        top, left = int(offsets[i, 0]), int(offsets[i, 1])
        crop = padded[i, :, top:top + 32, left:left + 32]
        out[i] = crop.flip(2) if flips[i] else crop
    return out


# --- model ------------------------------------------------------------------------------------------------------

class KerasConv(nn.Conv2d):
    """Conv2D with Keras's padding: 'same' pads (bottom/right first) so that out = ceil(in / stride)."""

    def __init__(self, cin, cout, k, stride, same, padding_mode):
        pad = (k - 1) // 2 if same and (stride == 1 or padding_mode == "symmetric") else 0
        super().__init__(cin, cout, k, stride=stride, padding=pad, bias=True)
        # Keras 'same' with stride 2 on even sizes: total padding k - 2, all of it bottom/right.
        self.extra = (0, k - 2, 0, k - 2) if same and stride == 2 and padding_mode == "keras" and k > 1 else None

    def forward(self, x):
        if self.extra is not None:
            x = F.pad(x, self.extra)
        return super().forward(x)


def bn(c):
    return nn.BatchNorm2d(c, eps=BN_EPSILON, momentum=BN_MOMENTUM)


class Block(nn.Module):
    def __init__(self, cin, cout, stride, project, padding_mode):
        super().__init__()
        self.conv1 = KerasConv(cin, cout, 3, stride, True, padding_mode)
        self.bn1 = bn(cout)
        self.conv2 = KerasConv(cout, cout, 3, 1, True, padding_mode)
        self.bn2 = bn(cout)
        self.shortcut = nn.Sequential(KerasConv(cin, cout, 1, stride, True, padding_mode), bn(cout)) \
            if project else None

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = self.shortcut(x) if self.shortcut is not None else x
        return F.relu(y + s)


class ResNetCifar(nn.Module):
    def __init__(self, depth, padding_mode="keras", classes=10, fc_init="normal"):
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise SystemExit(f"pytorch_resnet: depth {depth} is not 6n + 2")
        n = (depth - 2) // 6
        self.conv1 = KerasConv(3, 16, 3, 1, False, padding_mode)  # after ZeroPadding2D(1): valid
        self.bn1 = bn(16)
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(Block(cin, cout, stride if i == 0 else 1, i == 0, padding_mode))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                std = math.sqrt(2.0 / fan_in) / 0.87962566103423978  # Keras's truncated he_normal
                nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
                nn.init.zeros_(m.bias)
        if fc_init == "he_normal":
            std = math.sqrt(2.0 / self.fc.in_features) / 0.87962566103423978
            nn.init.trunc_normal_(self.fc.weight, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = F.pad(x, (1, 1, 1, 1))
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        return self.fc(x.mean(dim=(2, 3)))

    def param_groups(self, l2):
        """Conv and dense kernels and biases decay (Keras's L2 λ = SGD weight decay 2λ); BN parameters do not."""
        decay, rest = [], []
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                decay += [m.weight, m.bias]
            elif isinstance(m, nn.BatchNorm2d):
                rest += [m.weight, m.bias]
        return [{"params": decay, "weight_decay": 2 * l2}, {"params": rest, "weight_decay": 0.0}]


# --- schedule ---------------------------------------------------------------------------------------------------

def learning_rate(a, epoch_float):
    if a.schedule == "cosine":
        if epoch_float < a.warmup_epochs:
            return a.lr * epoch_float / a.warmup_epochs
        t = (epoch_float - a.warmup_epochs) / max(a.epochs - a.warmup_epochs, 1e-9)
        return a.lr * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))
    if a.warmup_epochs and epoch_float < a.warmup_epochs:
        return a.lr * epoch_float / a.warmup_epochs
    # The tutorial's 60 epochs: 0.1, 0.01 from epoch 30, 0.001 from 45; scaled for other --epochs.
    if epoch_float >= a.epochs * 45 / 60:
        return a.lr * 0.01
    if epoch_float >= a.epochs * 30 / 60:
        return a.lr * 0.1
    return a.lr


# --- worker -----------------------------------------------------------------------------------------------------

def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(a):
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: every thread's Python stack
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ.get("MASTER_PORT", "29500"))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    x_train, y_train = read_batches(a.data_dir, [f"data_batch_{i}.bin" for i in range(1, 6)])
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    channels_last = a.layout == "channels_last"
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    torch.manual_seed(a.seed)
    model = ResNetCifar(a.depth, a.padding, fc_init=a.fc_init).to(memory_format=fmt)
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(model.param_groups(L2), lr=a.lr, momentum=0.9, nesterov=a.nesterov)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    global_batch = a.batch * world
    steps_per_epoch = x_train.shape[0] // global_batch
    aug_gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    orders = {}

    def batch_at(epoch, s):
        if epoch not in orders:
            orders.clear()
            orders[epoch] = torch.randperm(x_train.shape[0], generator=torch.Generator().manual_seed(a.seed + epoch))
        lo = s * global_batch + rank * a.batch
        idx = orders[epoch][lo:lo + a.batch]
        x = standardize(augment(x_train[idx], aug_gen)).contiguous(memory_format=fmt)
        return x, y_train[idx]

    def train_step(epoch, s, steps_in_epoch=steps_per_epoch):
        lr = learning_rate(a, epoch + s / steps_in_epoch)
        for g in opt.param_groups:
            g["lr"] = lr
        xb, yb = batch_at(epoch, s)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xb), yb)
        loss.backward()
        opt.step()
        return loss.item(), lr

    if not a.time_to_accuracy:
        ddp.train()
        total = a.warmup + a.steps
        for s in range(a.warmup):
            train_step(s // steps_per_epoch, s % steps_per_epoch)
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        loss_sum = 0.0
        for s in range(a.warmup, total):
            loss_sum += train_step(s // steps_per_epoch, s % steps_per_epoch)[0]
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        job = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(job, op=dist.ReduceOp.MAX)
        slots = torch.zeros(2 * world, dtype=torch.float64)
        slots[rank], slots[world + rank] = peak_rss_mib(), cpu_seconds
        dist.all_reduce(slots)
        if rank == 0:
            steps_per_s = a.steps / job.item()
            print(json.dumps({
                "impl": "torch", "model": f"resnet{a.depth}", "layout": a.layout, "padding": a.padding,
                "workers": world, "threads": a.threads, "batch": a.batch, "warmup": a.warmup, "steps": a.steps,
                "seconds": round(job.item(), 4), "steps_per_s": round(steps_per_s, 4),
                "samples_per_s": round(steps_per_s * global_batch, 2),
                "samples_per_s_per_worker": round(steps_per_s * a.batch, 2),
                "cpu_s_per_step": round(slots[world:].sum().item() / a.steps, 4),
                "peak_rss_mib": round(max(slots[:world].tolist()), 1),
                "loss": round(loss_sum / max(a.steps, 1), 5), "torch": torch.__version__}), flush=True)
        finish()

    # Time to accuracy: the test set split among workers, correct counts summed.
    x_test, y_test = read_batches(a.data_dir, ["test_batch.bin"])
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)
    lo, hi = rank * len(y_test) // world, (rank + 1) * len(y_test) // world
    steps = a.steps_per_epoch or steps_per_epoch
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(a.epochs):
        ddp.train()
        loss_sum, lr = 0.0, 0.0
        for s in range(steps):
            loss, lr = train_step(epoch, s, steps)
            loss_sum += loss
        if (epoch + 1) % a.validation_freq != 0:  # Keras's validation_freq: no evaluation, no line
            continue
        ddp.eval()
        correct = torch.zeros(3, dtype=torch.float64)  # correct, examples, summed loss
        with torch.no_grad():
            for b in range(lo, hi, 500):
                xb = x_test[b:min(b + 500, hi)].permute(0, 3, 1, 2).float().div_(255.0)
                xb = standardize(xb).contiguous(memory_format=fmt)
                yb = y_test[b:min(b + 500, hi)]
                logits = model(xb)
                correct += torch.tensor([(logits.argmax(1) == yb).sum().item(), len(yb),
                                         F.cross_entropy(logits, yb, reduction="sum",
                                                         label_smoothing=a.label_smoothing).item()], dtype=torch.float64)
        dist.all_reduce(correct)
        train_loss = torch.tensor([loss_sum / steps], dtype=torch.float64)
        dist.all_reduce(train_loss)
        if rank == 0:
            print(json.dumps({
                "impl": "torch", "model": f"resnet{a.depth}", "layout": a.layout, "workers": world,
                "threads": a.threads, "batch": a.batch, "epoch": epoch + 1, "steps": steps,
                "wall_s": round(time.perf_counter() - start, 2), "lr": lr,
                "train_loss": round(train_loss.item() / world, 5),
                "test_loss": round(correct[2].item() / correct[1].item(), 5),
                "test_accuracy": round(correct[0].item() / correct[1].item(), 5)}), flush=True)
    finish()


def finish():
    """Ends a worker once every rank is done: a barrier, then exit without the interpreter's teardown. Once here, a
    1-worker run printed its result and then hung for minutes in exit (main thread in a futex wait after
    destroy_process_group, torch 1.13 + gloo); nothing is left to clean up that the OS does not."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a):
    """Starts --workers copies of this script as workers on 127.0.0.1; returns the worst exit status."""
    port = free_port()
    argv = [sys.executable, os.path.abspath(__file__)] + [x for x in sys.argv[1:]]
    procs = [subprocess.Popen(argv, env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.workers),
                                              MASTER_PORT=str(port)))
             for r in range(a.workers)]
    # A worker that outlives the others by a minute after they all succeeded is stuck in torch's teardown (seen
    # with 1.13's gloo: rank 0 waiting in a futex after its result line was printed): it is killed and not counted
    # as a failure, so a finished measurement is not lost to a hang after it.
    codes = [None] * len(procs)
    while any(c is None for c in codes):
        for r, p in enumerate(procs):
            if codes[r] is None:
                codes[r] = p.poll()
        if all(c == 0 for c in codes if c is not None) and sum(c is not None for c in codes) >= 1:
            deadline = time.monotonic() + 60
            while any(c is None for c in codes) and time.monotonic() < deadline:
                time.sleep(0.2)
                codes = [c if c is not None else p.poll() for c, p in zip(codes, procs)]
            for r, p in enumerate(procs):
                if codes[r] is None:
                    p.kill()
                    p.wait()
                    print(f"pytorch_resnet: worker {r} had not exited 60 s after the others finished (stuck in "
                          f"torch's teardown); killed", file=sys.stderr, flush=True)
                    codes[r] = 0
        time.sleep(0.2)
    return max(abs(c) for c in codes)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=".cache/cifar10")
    p.add_argument("--depth", type=int, default=56, help="6n + 2: 20, 32, 44, 56, 110")
    p.add_argument("--batch", type=int, default=128, help="per worker")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per worker")
    p.add_argument("--layout", choices=["default", "channels_last"], default="default")
    p.add_argument("--padding", choices=["keras", "symmetric"], default="keras",
                   help="strided 3x3 'same' convolutions: Keras's bottom/right padding or PyTorch's 1 all round")
    p.add_argument("--fc-init", choices=["normal", "he_normal"], default="normal",
                   help="Dense kernel: N(0, 0.01) (tf_resnet.py's) or Keras's he_normal (mwstrat's resnet_cifar)")
    p.add_argument("--workers", type=int, default=1, help="launch this many local workers (ignored in a worker)")
    p.add_argument("--warmup", type=int, default=2, help="throughput: untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="throughput: timed steps")
    p.add_argument("--time-to-accuracy", action="store_true", help="train --epochs, print test accuracy per epoch")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: a full pass")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--schedule", choices=["piecewise", "cosine"], default="piecewise")
    p.add_argument("--warmup-epochs", type=float, default=0.0)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="the loss's (as mwstrat's model_options)")
    p.add_argument("--validation-freq", type=int, default=1, help="time to accuracy: evaluate every n-th epoch")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    if a.validation_freq < 1:
        p.error(f"--validation-freq {a.validation_freq} is not >= 1")
    if "RANK" in os.environ:
        worker(a)
        return 0
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
