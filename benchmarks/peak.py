"""What this machine's TensorFlow kernels can do: dense 3x3 convolution and matrix
product throughput in one precision, in a process of its own (thread pools and
oneDNN are fixed when TensorFlow starts). The yardstick for the Trainer's
efficiency in `make bench`. And how fast this host runs single-threaded Python, which
most of the pipeline outside the fit is (imports, Beam, TFMA): the yardstick for that
time between hosts. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import components  # noqa: F401  (selects Keras 2 before TensorFlow loads)
from components.trainer.hardware import decide_precision, detect
from components.trainer.keras import tf

# A 3x3 convolution of the size that dominates small CIFAR networks (the reference the
# efficiency goal was set against), and a square matrix product.
CONV_SHAPE = (128, 32, 32, 64)  # batch, height, width, channels in = channels out
MATMUL_SIZE = 2048
# Single-threaded Python as seconds per sum(range(10**8)), timed in chunks of 10**7.
PYTHON_CHUNK = 10**7
PYTHON_CHUNKS_PER_FIGURE = 10


def _gflops(run, flops_per_call: float, min_seconds: float) -> float:
    run()  # trace and warm up
    run()
    calls, started = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - started < min_seconds:
        run()
        calls += 1
    return flops_per_call * calls / (time.perf_counter() - started) / 1e9


def python_seconds(min_seconds: float) -> float:
    """Seconds for sum(range(10**8)), from the fastest of at least 3 timed chunks of 10**7
    (and of as many as `min_seconds` allows), as `_gflops` times its kernels: one core's
    interpreter speed."""
    best, calls, started = float("inf"), 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - started < min_seconds:
        chunk = time.perf_counter()
        sum(range(PYTHON_CHUNK))
        best = min(best, time.perf_counter() - chunk)
        calls += 1
    return best * PYTHON_CHUNKS_PER_FIGURE


def measure(precision: str, min_seconds: float) -> dict:
    dtype = (
        tf.bfloat16
        if precision == "mixed_bfloat16"
        else (tf.float16 if precision == "mixed_float16" else tf.float32)
    )
    batch, height, width, channels = CONV_SHAPE
    images = tf.cast(tf.random.normal(CONV_SHAPE), dtype)
    kernel = tf.cast(tf.random.normal([3, 3, channels, channels]), dtype)
    conv = tf.function(lambda: tf.nn.conv2d(images, kernel, 1, "SAME"))
    conv_flops = 2.0 * batch * height * width * 9 * channels * channels
    left = tf.cast(tf.random.normal([MATMUL_SIZE, MATMUL_SIZE]), dtype)
    matmul = tf.function(lambda: tf.matmul(left, left))
    return {
        "precision": precision,
        "conv3x3_gflops": _gflops(lambda: conv().numpy(), conv_flops, min_seconds),
        "matmul_gflops": _gflops(lambda: matmul().numpy(), 2.0 * MATMUL_SIZE**3, min_seconds),
        "python_seconds": python_seconds(min_seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--precision", default="auto", help="auto: what the Trainer would choose on this machine"
    )
    parser.add_argument("--min-seconds", type=float, default=3.0)
    args = parser.parse_args()
    precision = decide_precision(args.precision, detect("cpu")).policy
    print(json.dumps(measure(precision, args.min_seconds)))


if __name__ == "__main__":
    main()
