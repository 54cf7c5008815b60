#!/usr/bin/env python3
"""tf.data's side of the `records` family (benchmarks/run.py): one full pass over TFRecord shards of PNG images
(tools/tfrecord_convert's CIFAR-10 shards), read + decoded + augmented as the CIFAR-10 tutorial does, the peer of
benchmarks/data/records_bench.cpp:

  TFRecordDataset(files) -> map(parse_single_example + decode_png + pad 4 (resize_with_crop_or_pad to 40x40) +
  random_crop 32x32x3 + random_flip_left_right + per_image_standardization, num_parallel_calls=AUTOTUNE)
  -> batch(128, drop_remainder) -> prefetch(AUTOTUNE)

with TensorFlow's intra- and inter-op pools (tf.config.threading), tf.data's private threadpool and its
max_intra_op_parallelism all limited to --threads. Run one configuration per process (so ru_maxrss is its own):

  python tfdata_records.py --threads 1 [--batch 128] FILE|GLOB...

Prints one JSON line: records, wall and CPU seconds (getrusage RUSAGE_SELF, every thread) from building the
dataset to the end of the pass (the import of TensorFlow excluded), the same for the pass after the first batch,
records per second and per CPU second, the peak RSS (ru_maxrss, which includes TensorFlow's import) and, as
start_rss_mib, the resident memory once TensorFlow is imported, before the pipeline.
"""
import argparse
import glob
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def rss_mib():
    """VmRSS of this process now, MiB (None where /proc has none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--cols", type=int, default=32)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--pad", type=int, default=4)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    files = sorted(f for p in a.files for f in (glob.glob(p) if any(c in p for c in "*?[") else [p]))
    if not files:
        sys.exit("tfdata_records.py: no TFRecord file")

    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    import tensorflow as tf  # noqa: E402  (after the environment is set; its import timed apart)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.random.set_seed(1)
    import_wall, import_cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    import_rss = rss_mib()  # TensorFlow loaded, no pipeline yet

    rows, cols, ch, pad = a.rows, a.cols, a.channels, a.pad
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def prepare(record):
        ex = tf.io.parse_single_example(record, features)
        image = tf.io.decode_png(ex["image"], channels=ch)
        image = tf.image.resize_with_crop_or_pad(image, rows + 2 * pad, cols + 2 * pad)
        image = tf.image.random_crop(image, [rows, cols, ch])
        image = tf.image.random_flip_left_right(image)
        image = tf.image.per_image_standardization(image)
        return image, ex["label"]

    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    options = tf.data.Options()
    options.threading.private_threadpool_size = a.threads
    options.threading.max_intra_op_parallelism = a.threads
    ds = (tf.data.TFRecordDataset(files)
          .map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(a.batch, drop_remainder=True)
          .prefetch(tf.data.AUTOTUNE)
          .with_options(options))
    records = steps = 0
    checksum = 0.0
    wall1 = cpu1 = None
    for images, labels in ds:
        if wall1 is None:
            wall1, cpu1 = time.perf_counter(), cpu_seconds()
        n = int(labels.shape[0])
        records += n
        steps += 1
        checksum += float(images[0, 0, 0, 0]) + float(labels[0])
    wall2, cpu2 = time.perf_counter(), cpu_seconds()
    wall, cpu = wall2 - wall0, cpu2 - cpu0
    first = int(labels.shape[0]) if steps else 0
    row = {"impl": "tf.data", "tensorflow": tf.__version__, "threads": a.threads, "batch": a.batch,
           "files": len(files), "records": records, "steps": steps, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
           "first_batch_wall_s": round(wall1 - wall0, 4), "first_batch_cpu_s": round(cpu1 - cpu0, 4),
           # the pass after the first batch (graph tracing and the pipeline's start excluded)
           "pass_wall_s": round(wall2 - wall1, 4), "pass_cpu_s": round(cpu2 - cpu1, 4),
           "pass_records": records - first,
           "records_per_s": round(records / wall, 1), "records_per_cpu_s": round(records / cpu, 1),
           "import_wall_s": round(import_wall, 3), "import_cpu_s": round(import_cpu, 3),
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
           "start_rss_mib": import_rss,
           "checksum": round(checksum, 4)}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
