"""TensorFlow's side of the ResNet comparison: the tutorial's program (Keras ResNet on CIFAR-10 under
MultiWorkerMirroredStrategy), with a throughput mode and a time-to-accuracy mode like pytorch_resnet.py's.

Needs the virtual environment scripts/bench makes ($MWSTRAT_BENCH_VENV, default .cache/bench-venv: pip's
tensorflow-cpu, tf-keras and matplotlib; Keras 2 through tf-keras, because Keras 3 cannot run MWMS fit with two
workers, see benchmarks/train/tf_throughput.py). Either one process per worker with its own TF_CONFIG, as in the
tutorial, or as the launcher of --workers local workers on 127.0.0.1:

  .cache/bench-venv/bin/python benchmarks/resnet/tf_resnet.py --workers 2 --depth 56 --batch 128 --threads 1

Model: TensorFlow's official resnet_cifar_model (the tutorial's resnet56): ZeroPadding2D(1) + Conv2D(16, 3, valid) +
BN + ReLU; three stages of n = (depth - 2) / 6 blocks with 16, 32, 64 filters (strides 1, 2, 2), the first block of a
stage with a 1×1 Conv2D + BN projection shortcut, the others the identity; mean over H, W; Dense(10, softmax).
Biased convolutions, L2 2e-4 on kernels and biases, BN momentum 0.997 and epsilon 1e-5, he_normal kernels, Dense
kernel N(0, 0.01). SGD momentum 0.9, learning rate --lr: piecewise 0.1 / 0.01 / 0.001 at epochs 30 and 45 (scaled to
--epochs) or warm-up + cosine. Data: the real CIFAR-10 binary batches; the tutorial's pipeline (resize_with_crop_or_pad
to 40×40, random_crop 32×32, random_flip_left_right, per_image_standardization; shuffle; global batch = --batch ×
workers, auto-sharded by the strategy); the test set standardized only.

Throughput: one fit of --warmup + --steps steps, the clock read after the last warm-up step and after the last step;
the chief prints one JSON line. --time-to-accuracy: fit --epochs with the test set as validation data; the chief
prints one JSON line per epoch with the wall time since training began.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "TF_CONFIG" in os.environ:  # a worker: import TensorFlow (the launcher never does)
    try:
        import tf_keras
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        KERAS = "tf-keras " + tf_keras.__version__
    except ImportError:
        import keras
        KERAS = "keras " + keras.__version__
    import tensorflow as tf  # noqa: E402

L2 = 2e-4
BN_MOMENTUM = 0.997
BN_EPSILON = 1e-5


def read_batches(data_dir, names):
    """(images uint8 [N, 32, 32, 3], labels int64 [N]) from official CIFAR-10 binary batch files."""
    base = os.path.join(data_dir, "cifar-10-batches-bin")
    if not os.path.isdir(base):
        base = data_dir
    images, labels = [], []
    for name in names:
        path = os.path.join(base, name)
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size != 10000 * 3073:
            sys.exit(f"tf_resnet: {path} holds {raw.size} bytes, not 10000 records of 3073 (run scripts/fetch-cifar10)")
        rec = raw.reshape(10000, 3073)
        labels.append(rec[:, 0].astype(np.int64))
        images.append(rec[:, 1:].reshape(10000, 3, 32, 32).transpose(0, 2, 3, 1))
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels)


def resnet_cifar(depth, classes=10):
    layers = tf.keras.layers
    reg = tf.keras.regularizers.l2(L2)

    def conv(x, filters, kernel, strides, padding, name):
        return layers.Conv2D(filters, kernel, strides=strides, padding=padding, kernel_initializer="he_normal",
                             kernel_regularizer=reg, bias_regularizer=reg, name=name)(x)

    def bn(x, name):
        return layers.BatchNormalization(axis=3, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name)(x)

    def block(x, filters, strides, project, name):
        y = conv(x, filters, 3, strides, "same", name + "_2a")
        y = layers.Activation("relu")(bn(y, name + "_2a_bn"))
        y = bn(conv(y, filters, 3, 1, "same", name + "_2b"), name + "_2b_bn")
        s = bn(conv(x, filters, 1, strides, "valid", name + "_1"), name + "_1_bn") if project else x
        return layers.Activation("relu")(layers.add([y, s]))

    if (depth - 2) % 6 != 0:
        sys.exit(f"tf_resnet: depth {depth} is not 6n + 2")
    n = (depth - 2) // 6
    inputs = layers.Input(shape=(32, 32, 3))
    x = layers.ZeroPadding2D(padding=(1, 1), name="conv1_pad")(inputs)
    x = conv(x, 16, 3, 1, "valid", "conv1")
    x = layers.Activation("relu")(bn(x, "bn_conv1"))
    for stage, (filters, strides) in enumerate(((16, 1), (32, 2), (64, 2)), start=2):
        for i in range(n):
            x = block(x, filters, strides if i == 0 else 1, i == 0, f"res{stage}_block_{i + 1}")
    x = layers.Lambda(lambda t: tf.reduce_mean(t, [1, 2]), name="reduce_mean")(x)
    outputs = layers.Dense(classes, activation="softmax", kernel_initializer=tf.keras.initializers.RandomNormal(
        stddev=0.01), kernel_regularizer=reg, bias_regularizer=reg, name="fc10")(x)
    return tf.keras.Model(inputs, outputs, name=f"resnet{depth}")


def learning_rate(a, epoch):
    if a.schedule == "cosine":
        if epoch < a.warmup_epochs:
            return a.lr * (epoch + 1) / a.warmup_epochs
        t = (epoch - a.warmup_epochs) / max(a.epochs - a.warmup_epochs, 1)
        return a.lr * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))
    if epoch >= a.epochs * 45 / 60:
        return a.lr * 0.01
    if epoch >= a.epochs * 30 / 60:
        return a.lr * 0.1
    return a.lr


def worker(a):
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    world = strategy.num_replicas_in_sync
    rank = int(json.loads(os.environ["TF_CONFIG"]).get("task", {}).get("index", 0))
    global_batch = a.batch * world

    x_train, y_train = read_batches(a.data_dir, [f"data_batch_{i}.bin" for i in range(1, 6)])

    def augmentation(x, y):  # the tutorial's
        x = tf.image.resize_with_crop_or_pad(x, 40, 40)
        x = tf.image.random_crop(x, [32, 32, 3])
        return tf.image.random_flip_left_right(x), y

    def normalize(x, y):
        return tf.image.per_image_standardization(x), y

    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).map(augmentation).map(normalize)
             .shuffle(x_train.shape[0], seed=a.seed).repeat().batch(global_batch, drop_remainder=True)
             .prefetch(2))
    steps_per_epoch = a.steps_per_epoch or x_train.shape[0] // global_batch

    tf.keras.utils.set_random_seed(a.seed)
    with strategy.scope():
        model = resnet_cifar(a.depth)
        model.compile(loss="sparse_categorical_crossentropy",
                      optimizer=tf.keras.optimizers.SGD(learning_rate=a.lr, momentum=0.9, nesterov=a.nesterov),
                      metrics=["accuracy"])

    if not a.time_to_accuracy:
        clock = {}

        class StepTimer(tf.keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                if a.warmup == 0:
                    clock["start"], clock["cpu_start"] = time.perf_counter(), time.process_time()

            def on_train_batch_end(self, batch, logs=None):
                if batch + 1 == a.warmup:
                    clock["start"], clock["cpu_start"] = time.perf_counter(), time.process_time()
                if batch == a.warmup + a.steps - 1:
                    clock["stop"], clock["cpu_stop"] = time.perf_counter(), time.process_time()

        hist = model.fit(train, epochs=1, steps_per_epoch=a.warmup + a.steps, callbacks=[StepTimer()], verbose=0)
        seconds = clock["stop"] - clock["start"]
        cpu_seconds = clock["cpu_stop"] - clock["cpu_start"]
        mine = [0.0] * (3 * world)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        mine[rank], mine[world + rank], mine[2 * world + rank] = seconds, rss, cpu_seconds
        local = tf.constant(mine, dtype=tf.float64)

        @tf.function
        def gather():
            ctx = lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)  # noqa
            return strategy.experimental_local_results(strategy.run(ctx))[0]

        allv = gather().numpy().tolist()
        if rank == 0:
            job = max(allv[:world])
            steps_per_s = a.steps / job
            print(json.dumps({
                "impl": "tensorflow-mwms", "model": f"resnet{a.depth}", "workers": world, "threads": a.threads,
                "batch": a.batch, "warmup": a.warmup, "steps": a.steps, "seconds": round(job, 4),
                "steps_per_s": round(steps_per_s, 4), "samples_per_s": round(steps_per_s * global_batch, 2),
                "samples_per_s_per_worker": round(steps_per_s * a.batch, 2),
                "cpu_s_per_step": round(sum(allv[2 * world:]) / a.steps, 4),
                "peak_rss_mib": round(max(allv[world:2 * world]), 1), "loss": round(hist.history["loss"][-1], 5),
                "tensorflow": tf.__version__, "keras": KERAS}), flush=True)
        return

    x_test, y_test = read_batches(a.data_dir, ["test_batch.bin"])
    test = (tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(normalize).batch(global_batch))
    start = {}

    class EpochLog(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            start["t"] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            if rank == 0:
                print(json.dumps({
                    "impl": "tensorflow-mwms", "model": f"resnet{a.depth}", "workers": world, "threads": a.threads,
                    "batch": a.batch, "epoch": epoch + 1, "steps": steps_per_epoch,
                    "wall_s": round(time.perf_counter() - start["t"], 2), "lr": learning_rate(a, epoch),
                    "train_loss": round(logs["loss"], 5), "test_loss": round(logs["val_loss"], 5),
                    "test_accuracy": round(logs["val_accuracy"], 5)}), flush=True)

    model.fit(train, epochs=a.epochs, steps_per_epoch=steps_per_epoch, validation_data=test, verbose=0,
              callbacks=[tf.keras.callbacks.LearningRateScheduler(lambda e: learning_rate(a, e)), EpochLog()])


def free_ports(n):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
    from common import procs
    return procs.free_ports(n)


def launch(a):
    """Starts --workers copies of this script, each with its own TF_CONFIG; returns the worst exit status."""
    hosts = [f"127.0.0.1:{p}" for p in free_ports(a.workers)]
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    procs = []
    for r in range(a.workers):
        config = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": r}})
        procs.append(subprocess.Popen(argv, env=dict(os.environ, TF_CONFIG=config)))
    return max(abs(p.wait()) for p in procs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=".cache/cifar10")
    p.add_argument("--depth", type=int, default=56)
    p.add_argument("--batch", type=int, default=128, help="per worker")
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per worker")
    p.add_argument("--workers", type=int, default=1, help="launch this many local workers (ignored in a worker)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--time-to-accuracy", action="store_true")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: a full pass")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--schedule", choices=["piecewise", "cosine"], default="piecewise")
    p.add_argument("--warmup-epochs", type=int, default=0)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    if "TF_CONFIG" in os.environ:
        worker(a)
        return 0
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
