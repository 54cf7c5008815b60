"""TensorFlow MultiWorkerMirroredStrategy training throughput of the tutorial CNN: the protocol of train_throughput.

One process per worker, each with its own TF_CONFIG (compare.py sets it), as in TensorFlow's multi-worker Keras
tutorial. Needs `pip install tensorflow-cpu tf-keras` (compare.py looks for it in build/trainbench/tfvenv, or
--tf-python); without tf-keras, Keras 3 is used, which runs one worker but fails with two (see below).

  TF_CONFIG='{"cluster":{"worker":["127.0.0.1:23456"]},"task":{"type":"worker","index":0}}' \
    python tf_throughput.py --data-dir .cache/mnist

Model: the tutorial's Keras model — Input(28, 28) -> Reshape(28, 28, 1) -> Conv2D(32, 3, relu) -> Flatten ->
Dense(128, relu) -> Dense(10); SparseCategoricalCrossentropy(from_logits=True); SGD(0.001); accuracy metric.
Intra- and inter-op thread pools of --threads. Data: real MNIST bytes, the tutorial's pipeline (shuffle, repeat,
batch of the global batch = 64 × workers, auto-sharded by the strategy), normalised to float [0, 1] per batch.
One `fit` of --warmup + --steps steps; a callback reads the clock after the last warm-up step and after the last
step. The chief prints one JSON line like train_throughput's.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Keras 3 (tf.keras in TensorFlow >= 2.16) fails in model.fit under MultiWorkerMirroredStrategy with more than one
# worker ("Attempt to convert a value (PerReplica...) to a Tensor"); Keras 2 (`pip install tf-keras`, selected by
# TF_USE_LEGACY_KERAS=1) is TensorFlow's supported path for it, so it is used when installed.
try:
    import tf_keras
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    KERAS = "tf-keras " + tf_keras.__version__
except ImportError:
    import keras
    KERAS = "keras " + keras.__version__
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_idx  # noqa: E402


class StepTimer(tf.keras.callbacks.Callback):
    """Wall and CPU clocks at the end of step warmup - 1 (or at the start of training) and at the end of step `last`."""

    def __init__(self, warmup, last):
        super().__init__()
        self.warmup, self.last = warmup, last
        self.start = self.stop = self.cpu_start = self.cpu_stop = None

    def on_train_begin(self, logs=None):
        if self.warmup == 0:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == self.warmup:
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
        if batch == self.last:
            self.stop, self.cpu_stop = time.perf_counter(), time.process_time()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default=".cache/mnist")
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    world = strategy.num_replicas_in_sync
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    rank = int(task.get("index", 0))

    images, labels = mnist_idx.load_train(a.data_dir)
    global_batch = a.batch * world
    if (a.warmup + a.steps) * global_batch > images.shape[0]:
        sys.exit(f"tf_throughput: --warmup + --steps must fit in one epoch ({images.shape[0] // global_batch} steps)")
    ds = (tf.data.Dataset.from_tensor_slices((images, labels))
          .shuffle(images.shape[0], seed=a.seed).repeat().batch(global_batch)
          .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)))

    tf.keras.utils.set_random_seed(a.seed)
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])

    timer = StepTimer(a.warmup, a.warmup + a.steps - 1)
    hist = model.fit(ds, epochs=1, steps_per_epoch=a.warmup + a.steps, callbacks=[timer], verbose=0)
    seconds, cpu_seconds = timer.stop - timer.start, timer.cpu_stop - timer.cpu_start

    # Gather every worker's time, peak RSS and CPU seconds with one all-reduce (one-hot slots, summed).
    mine = [0.0] * (3 * world)
    mine[rank], mine[world + rank], mine[2 * world + rank] = seconds, mnist_idx.peak_rss_mib(), cpu_seconds
    local = tf.constant(mine, dtype=tf.float64)

    @tf.function
    def gather():
        ctx = lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)  # noqa
        return strategy.experimental_local_results(strategy.run(ctx))[0]

    allv = gather().numpy().tolist()
    times, rss, cpu_total = allv[:world], allv[world:2 * world], sum(allv[2 * world:])
    if rank == 0:
        job = max(times)
        steps_per_s = a.steps / job
        print(json.dumps({
            "impl": "tensorflow-mwms", "workers": world, "threads": a.threads, "batch": a.batch, "steps": a.steps,
            "seconds": round(job, 4), "steps_per_s": round(steps_per_s, 3),
            "samples_per_s": round(steps_per_s * global_batch, 1), "peak_rss_mib": round(max(rss), 1),
            "peak_rss_mib_per_worker": [round(v, 1) for v in rss], "cpu_s_per_step": round(cpu_total / a.steps, 5),
            "loss": round(hist.history["loss"][-1], 5),
            "tensorflow": tf.__version__,
            "keras": KERAS}), flush=True)


if __name__ == "__main__":
    main()
