#!/usr/bin/python3
"""Checks mwstrat's ResNet loss and gradients against PyTorch's same model (benchmarks/resnet/pytorch_resnet.py).

Reads what NnGraphModel.ResNetLossAndGradientsMatchPyTorch writes with MWSTRAT_DUMP_RESNET_REFERENCE=<dir>
(<dir>/index.txt: `name offset rank dims...` per tensor; <dir>/data.bin: float64 values): the batch, every trained
weight in Keras's name and layout and mwstrat's gradient of it. Loads the weights into the PyTorch model (HWIO ->
OIHW, dense [in, out] -> [out, in], Keras 'same' padding), runs one training-mode forward and backward in float64
on the same batch with Keras's loss (cross-entropy + 2e-4 * sum of squares of conv/dense kernels and biases), then
prints the worst element-wise gradient difference and the C++ lines the test pastes (the loss, the L2 term and
the norm of every gradient tensor but the conv biases, whose gradient is zero up to rounding).

  /usr/bin/python3 tests/nn/resnet_pytorch_reference.py <dir> <depth>
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "resnet"))
import pytorch_resnet as pr  # noqa: E402


def main():
    directory, depth = sys.argv[1], int(sys.argv[2])
    torch.set_default_dtype(torch.float64)
    raw = np.fromfile(os.path.join(directory, "data.bin"), dtype=np.float64)
    t = {}
    for line in open(os.path.join(directory, "index.txt")):
        f = line.split()
        shape = [int(s) for s in f[3:3 + int(f[2])]]
        t[f[0]] = raw[int(f[1]):int(f[1]) + int(np.prod(shape))].reshape(shape)
    model = pr.ResNetCifar(depth, "keras").double()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    name = lambda base, i: base if i == 0 else f"{base}_{i}"  # noqa: E731  Keras's per-class names, in build order
    same = lambda a: a  # noqa: E731
    pairs = []
    for i, c in enumerate(convs):
        pairs += [(name("conv2d", i) + "/kernel", c.weight, lambda a: a.transpose(3, 2, 0, 1)),
                  (name("conv2d", i) + "/bias", c.bias, same)]
    for i, b in enumerate(bns):
        pairs += [(name("batch_normalization", i) + "/gamma", b.weight, same),
                  (name("batch_normalization", i) + "/beta", b.bias, same)]
    pairs += [("dense/kernel", model.fc.weight, lambda a: a.T), ("dense/bias", model.fc.bias, same)]
    if len(pairs) != (len(t) - 2) // 2:
        sys.exit(f"{len(pairs)} PyTorch tensors for {(len(t) - 2) // 2} mwstrat weights: another depth?")
    with torch.no_grad():
        for k, p, to_torch in pairs:
            p.copy_(torch.from_numpy(np.ascontiguousarray(to_torch(t[k]))))
    model.train()
    x = torch.from_numpy(np.ascontiguousarray(t["input"].transpose(0, 3, 1, 2)))
    y = torch.from_numpy(t["labels"].astype(np.int64))
    ce = F.cross_entropy(model(x), y)
    l2 = pr.L2 * sum((p ** 2).sum() for g in model.param_groups(pr.L2) if g["weight_decay"] > 0 for p in g["params"])
    (ce + l2).backward()
    worst, zero, norms = (0.0, ""), 0.0, []
    for k, p, to_torch in pairs:
        ours, theirs = to_torch(t["grad:" + k]), p.grad.numpy()
        scale = np.abs(theirs).max()
        if scale < 1e-10:  # conv biases before batch norm: a gradient of zero up to rounding, in both
            zero = max(zero, float(np.abs(ours).max()), float(scale))
            continue
        worst = max(worst, (float(np.abs(ours - theirs).max() / scale), k))
        norms.append(float(np.sqrt((theirs ** 2).sum())))
    print(f"# torch {torch.__version__}; worst gradient difference / the tensor's largest gradient {worst[0]:.3g} "
          f"({worst[1]}); largest of the zero gradients (biases before batch norm) {zero:.3g}")
    print(f"  const double torch_loss = {(ce + l2).item():.17g}, torch_l2 = {l2.item():.17g};")
    print("  const std::vector<double> torch_gradient_norms = {" + ", ".join(f"{v:.17g}" for v in norms) + "};")
    print("  // in the order: convolution kernels, batch norm gammas and betas, dense kernel and bias")


if __name__ == "__main__":
    main()
