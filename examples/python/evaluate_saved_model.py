#!/usr/bin/env python3
"""Evaluates a model saved by mwstrat (save_model, ModelCheckpoint) on the MNIST test set, outside mwstrat.

The file is a safetensors file with one tensor per weight in Keras's names and layouts (`conv2d/kernel` as
[kh, kw, in, out], `dense/kernel` as [in, out], ...) and the architecture as JSON under the metadata key
`mwstrat.architecture` (docs/checkpointing.md). This script rebuilds the forward pass from that list with numpy
alone, and with --keras also as a Keras model (where keras is installed), then prints loss and accuracy:

    python evaluate_saved_model.py model.safetensors .cache/mnist [--keras]

It also writes files the other way: --write-perturbed OUT saves the same weights, each scaled by 0.5, with
safetensors.numpy.save_file (tensors only), and prints the model's logits for the first 8 test images, so that a
C++ program can load OUT with load_model and compare its predictions.
"""
import argparse
import json
import struct

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def read_idx(path):
    raw = open(path, "rb").read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_mnist_test(directory):
    images = read_idx(f"{directory}/t10k-images-idx3-ubyte").astype(np.float32) * np.float32(1.0 / 255.0)
    labels = read_idx(f"{directory}/t10k-labels-idx1-ubyte").astype(np.int64)
    return images, labels


def activate(x, name):
    if name == "relu":
        return np.maximum(x, 0)
    if name in ("linear", None):
        return x
    raise ValueError(f"activation {name!r} is not supported here")


def conv2d(x, kernel, bias, strides, padding):
    kh, kw, _, out = kernel.shape
    sh, sw = strides
    n, h, w, c = x.shape
    if padding == "same":
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + kh - h, 0), max((ow - 1) * sw + kw - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    y = np.zeros((n, oh, ow, out), np.float32)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
            y += np.tensordot(patch, kernel[i, j], axes=([3], [0]))
    return y + bias


def max_pool(x, pool, strides, padding):
    if padding != "valid":
        raise ValueError("max pooling with 'same' padding is not supported here")
    (ph, pw), (sh, sw) = pool, strides
    n, h, w, c = x.shape
    oh, ow = (h - ph) // sh + 1, (w - pw) // sw + 1
    y = np.full((n, oh, ow, c), -np.inf, np.float32)
    for i in range(ph):
        for j in range(pw):
            y = np.maximum(y, x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :])
    return y


def forward(layers, weights, x):
    """The logits of a sequential model described by the architecture list (inference: dropout off)."""
    for layer in layers:
        cls, cfg, name = layer["class_name"], layer["config"], layer["name"]
        if cls == "InputLayer":
            continue
        if cls == "Reshape":
            x = x.reshape((x.shape[0],) + tuple(cfg["target_shape"]))
        elif cls == "Flatten":
            x = x.reshape(x.shape[0], -1)
        elif cls == "Conv2D":
            x = activate(conv2d(x, weights[f"{name}/kernel"], weights[f"{name}/bias"], cfg["strides"], cfg["padding"]),
                         cfg["activation"])
        elif cls == "Dense":
            x = activate(x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"], cfg["activation"])
        elif cls == "MaxPooling2D":
            x = max_pool(x, cfg["pool_size"], cfg["strides"], cfg["padding"])
        elif cls == "ReLU":
            x = np.maximum(x, 0)
        elif cls == "Dropout":
            pass
        elif cls == "Softmax":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            x = e / e.sum(axis=-1, keepdims=True)
        else:
            raise ValueError(f"layer {name}: class {cls} is not supported here")
    return x


def loss_and_accuracy(logits, labels):
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_probs[np.arange(len(labels)), labels].mean()
    return float(loss), float((logits.argmax(axis=1) == labels).mean())


def keras_model(layers, weights):
    import keras  # only with --keras
    model = keras.Sequential()
    for layer in layers:
        cls, cfg = layer["class_name"], dict(layer["config"])
        if cls == "InputLayer":
            model.add(keras.Input(batch_shape=tuple(cfg["batch_shape"])))
            continue
        model.add(getattr(keras.layers, cls)(name=layer["name"], **cfg))
    for layer in model.layers:
        names = [f"{layer.name}/{w}" for w in ("kernel", "bias")]
        if names[0] in weights:
            layer.set_weights([weights[n] for n in names])
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("mnist_dir")
    parser.add_argument("--keras", action="store_true", help="also evaluate it as a Keras model")
    parser.add_argument("--write-perturbed", metavar="OUT")
    args = parser.parse_args()

    with safe_open(args.model, framework="numpy") as f:
        metadata = f.metadata() or {}
    if "mwstrat.architecture" not in metadata:
        raise SystemExit(f"{args.model}: no mwstrat.architecture in the metadata (a backup, or a model saved by an "
                         "older mwstrat: load and save it again with save_model)")
    layers = json.loads(metadata["mwstrat.architecture"])
    weights = {k: v for k, v in load_file(args.model).items() if not k.startswith("optimizer/")}
    images, labels = load_mnist_test(args.mnist_dir)
    x = images.reshape((len(images),) + tuple(layers[0]["config"]["batch_shape"][1:]))
    logits = np.concatenate([forward(layers, weights, x[i:i + 1000]) for i in range(0, len(x), 1000)])
    loss, accuracy = loss_and_accuracy(logits, labels)
    print(f"numpy: loss={loss:.6f} accuracy={accuracy:.6f}")
    if args.keras:
        model = keras_model(layers, weights)
        k_loss, k_accuracy = loss_and_accuracy(np.asarray(model.predict(x, batch_size=1000, verbose=0)), labels)
        print(f"keras: loss={k_loss:.6f} accuracy={k_accuracy:.6f}")
    if args.write_perturbed:
        halved = {k: (v * np.float32(0.5)).astype(np.float32) for k, v in weights.items()}
        save_file(halved, args.write_perturbed)
        first = forward(layers, halved, x[:8])
        print("perturbed logits: " + " ".join(f"{v:.9g}" for v in first.ravel()))


if __name__ == "__main__":
    main()
