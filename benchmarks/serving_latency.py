"""CPU serving latency and throughput of the newest pushed model through `serving_default`
(PNG bytes in, probabilities out), as TF Serving would call it in-process.

    .venv/bin/python -m benchmarks.serving_latency [--model-dir DIR] [--requests 200]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np

from pipeline.local.predict import Classifier, encode_png, newest_version
from pipeline.settings.config import DEFAULT_SERVING_DIR


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-dir", default=str(DEFAULT_SERVING_DIR))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    classifier = Classifier(newest_version(args.model_dir))
    rng = np.random.default_rng(0)
    pngs = [encode_png(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(256)]
    for _ in range(5):  # warm-up: graph tracing and oneDNN kernel selection
        classifier.probabilities(pngs[:1])
        classifier.probabilities(pngs[: args.batch])
    single = []
    for i in range(args.requests):
        started = time.perf_counter()
        classifier.probabilities([pngs[i % len(pngs)]])
        single.append(time.perf_counter() - started)
    batched = []
    for i in range(args.batches):
        batch = [pngs[(i * args.batch + j) % len(pngs)] for j in range(args.batch)]
        started = time.perf_counter()
        classifier.probabilities(batch)
        batched.append(time.perf_counter() - started)
    single_ms = np.array(single) * 1000
    print(f"model: {classifier.version_dir}")
    print(
        f"one image   p50 {np.percentile(single_ms, 50):.2f} ms   "
        f"p99 {np.percentile(single_ms, 99):.2f} ms   ({args.requests} requests)"
    )
    print(
        f"batch of {args.batch}: {args.batch / np.median(batched):.0f} images/s "
        f"(median of {args.batches} batches, {np.median(batched) * 1000:.1f} ms per batch)"
    )


if __name__ == "__main__":
    main()
