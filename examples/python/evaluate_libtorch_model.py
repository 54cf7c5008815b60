#!/usr/bin/python3
"""Loads a model that examples/libtorch_mnist saved (save_model) into the same network written in PyTorch, and
evaluates it on the MNIST test set: the weights keep the module's own names and layouts (`conv1.weight` as
[out, in, kh, kw], `fc1.weight` as [out, in], ...), so `load_state_dict` takes them as they are.

    /usr/bin/python3 evaluate_libtorch_model.py model.safetensors .cache/mnist

Prints `loss=... accuracy=... examples=...`. Needs only PyTorch and numpy (Debian's python3-torch); the
safetensors container (an 8-byte header length, a JSON header, the raw little-endian tensors) is read here.
"""
import json
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    raw = open(path, "rb").read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = raw[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {entry['dtype']}, not F32")
        begin, end = entry["data_offsets"]
        values = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
        tensors[name] = torch.from_numpy(values.copy())
    return tensors


def read_idx(path):
    raw = open(path, "rb").read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Cnn(torch.nn.Module):
    """examples/libtorch_mnist's `cnn`, with the same module names."""

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
    if len(sys.argv) != 3:
        sys.exit("usage: evaluate_libtorch_model.py MODEL.safetensors MNIST_DIR")
    model_path, mnist = sys.argv[1], sys.argv[2]
    weights = {name: t for name, t in read_safetensors(model_path).items() if not name.startswith("optimizer")}
    net = Cnn()
    net.load_state_dict(weights, strict=True)
    images = torch.from_numpy(read_idx(f"{mnist}/t10k-images-idx3-ubyte").astype(np.float32) / np.float32(255.0))
    labels = torch.from_numpy(read_idx(f"{mnist}/t10k-labels-idx1-ubyte").astype(np.int64))
    with torch.no_grad():
        logits = net(images.reshape(-1, 1, 28, 28))
        loss = torch.nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(1) == labels).float().mean().item()
    print(f"loss={loss:.6f} accuracy={accuracy:.6f} examples={labels.numel()}")


if __name__ == "__main__":
    main()
