#!/usr/bin/python3
"""PyTorch (oneDNN) convolutions on ResNet-56's layer shapes, the same list as conv_bench.cpp: forward,
backward-data and backward-filter (+ bias) at batch 128, channels_last, one thread (torch.set_num_threads(1)).

    /usr/bin/python3 benchmarks/kernels/torch_conv_bench.py [--seconds 1.0] [--repeats 3]

Prints one JSON line per (pass, shape): {"impl": "torch", "name": "<pass>/<shape>", "gflops": <best>,
"cpu_ms": <best>}. Times are CPU seconds of the process (one thread; on a shared machine wall time would also count
the time other processes held the core), the best of `repeats` runs of at least `seconds` each. Padding is
symmetric (PyTorch has no asymmetric `same` for strided convolutions); the flop count is the same.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

# (key, count, h, w, c, f, k, s, same) as in conv_bench.cpp
SHAPES = [
    ("stem_34x34_3-16_3x3", 1, 34, 34, 3, 16, 3, 1, False),
    ("32x32_16-16_3x3", 18, 32, 32, 16, 16, 3, 1, True),
    ("32x32_16-16_1x1", 1, 32, 32, 16, 16, 1, 1, True),
    ("32x32_16-32_3x3_s2", 1, 32, 32, 16, 32, 3, 2, True),
    ("32x32_16-32_1x1_s2", 1, 32, 32, 16, 32, 1, 2, True),
    ("16x16_32-32_3x3", 17, 16, 16, 32, 32, 3, 1, True),
    ("16x16_32-64_3x3_s2", 1, 16, 16, 32, 64, 3, 2, True),
    ("16x16_32-64_1x1_s2", 1, 16, 16, 32, 64, 1, 2, True),
    ("8x8_64-64_3x3", 17, 8, 8, 64, 64, 3, 1, True),
]
BATCH = 128


def timed(fn, seconds, repeats):
    fn()  # warm up (oneDNN primitive creation, allocations)
    best = float("inf")
    for _ in range(repeats):
        n = 0
        start = time.process_time()
        while True:
            fn()
            n += 1
            elapsed = time.process_time() - start
            if elapsed >= seconds:
                break
        best = min(best, elapsed / n)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cl = torch.channels_last
    for key, _count, h, w, c, f, k, s, same in SHAPES:
        pad = (k - 1) // 2 if same else 0
        x = torch.randn(BATCH, c, h, w).to(memory_format=cl)
        weight = torch.randn(f, c, k, k).to(memory_format=cl)
        bias = torch.randn(f)
        y = F.conv2d(x, weight, bias, stride=s, padding=pad)
        oh, ow = y.shape[2], y.shape[3]
        dy = torch.randn_like(y).contiguous(memory_format=cl)
        flops = 2.0 * BATCH * oh * ow * f * k * k * c

        def forward():
            F.conv2d(x, weight, bias, stride=s, padding=pad)

        def backward(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, weight, [f], [s, s], [pad, pad], [1, 1], False, [0, 0], 1, mask)

        passes = [("forward", forward), ("backward_data", backward([True, False, False])),
                  ("backward_filter", backward([False, True, True]))]
        with torch.no_grad():
            for name, fn in passes:
                if name == "backward_data" and c == 3:
                    continue  # the stem's input is the data: no gradient needed (as in conv_bench.cpp)
                label = f"{name}/{key}"
                if args.filter and args.filter not in label:
                    continue
                t = timed(fn, args.seconds, args.repeats)
                print(json.dumps({"impl": "torch", "name": label, "gflops": flops / t * 1e-9, "cpu_ms": t * 1e3}),
                      flush=True)


if __name__ == "__main__":
    main()
