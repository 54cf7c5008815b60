"""Reads MNIST's raw IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte) into numpy uint8/int64 arrays.

Shared by ddp_throughput.py and tf_throughput.py so both frameworks train on the same real data as mwstrat.
Images stay bytes (as mwstrat keeps them) and are normalised to float [0, 1] per batch.
"""
import os
import struct

import numpy as np


def _read(path, magic, dims):
    with open(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        raise ValueError(f"{path}: magic {got:#x}, expected {magic:#x}")
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {body.size} bytes of data, the header says {shape}")
    return body.reshape(shape)


def load_train(data_dir):
    """Returns (images uint8 [60000, 28, 28], labels int64 [60000])."""
    images = _read(os.path.join(data_dir, "train-images-idx3-ubyte"), 0x803, 3)
    labels = _read(os.path.join(data_dir, "train-labels-idx1-ubyte"), 0x801, 1).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{data_dir}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def peak_rss_mib():
    """This process's peak resident set size so far (VmHWM), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
