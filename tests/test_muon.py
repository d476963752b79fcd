"""Muon (components/trainer/muon.py) against a numpy reference of the same step, in float32
under mixed_bfloat16, and with identical weights on all 8 replicas of a MirroredStrategy."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from components.trainer import model, muon
from components.trainer.keras import keras, tf

A, B, C = muon.NEWTON_SCHULZ_COEFFICIENTS


def reference_newton_schulz(matrix: np.ndarray, steps: int = 3) -> np.ndarray:
    x = matrix.astype(np.float64)
    x = x / (np.linalg.norm(x) + 1e-7)
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    for _ in range(steps):
        gram = x @ x.T
        x = A * x + (B * gram + C * gram @ gram) @ x
    return x.T if tall else x


def reference_steps(kernel, bias, gradients, filter_rates, rates, decay):
    """The update of airbench94_muon for the [k, k, in, out] kernel, as PyTorch would do it on
    [out, in, k, k] (filter_momentum 0.6, Nesterov), and Keras' Nesterov SGD (momentum 0.85)
    with decoupled weight decay for the bias, over successive steps."""
    weights = np.transpose(kernel, (3, 2, 0, 1)).astype(np.float64)  # PyTorch's layout
    out = weights.shape[0]
    buffer, velocity, bias = np.zeros_like(weights), np.zeros_like(bias), bias.astype(np.float64)
    for (kernel_gradient, bias_gradient), filter_rate, rate in zip(gradients, filter_rates, rates):
        gradient = np.transpose(kernel_gradient, (3, 2, 0, 1))
        buffer = 0.6 * buffer + gradient
        direction = gradient + 0.6 * buffer
        weights = weights * np.sqrt(out) / np.linalg.norm(weights)
        step = reference_newton_schulz(direction.reshape(out, -1)).reshape(weights.shape)
        weights = weights - filter_rate * step
        bias = bias - bias * decay * rate
        velocity = 0.85 * velocity - rate * bias_gradient
        bias = bias + 0.85 * velocity - rate * bias_gradient
    return np.transpose(weights, (2, 3, 1, 0)), bias


@pytest.mark.parametrize("shape", [(6, 20), (20, 6), (8, 8)])
def test_newton_schulz_matches_numpy_and_flattens_the_spectrum(shape):
    matrix = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    result = muon.newton_schulz(tf.constant(matrix)).numpy()
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, reference_newton_schulz(matrix), rtol=1e-4, atol=1e-5)
    singular = np.linalg.svd(result, compute_uv=False)
    assert singular.min() > 0.3 and singular.max() < 1.3  # near 1, not exactly 1


def _two_steps(policy: str, xla: bool = False):
    """Two steps of `model.compile_model`'s Muon on a conv kernel and a bias, from the
    recipe's schedule machinery (a one-cycle over 4 steps, so each step has its own rate);
    with `xla`, each step compiled by XLA, as TPUStrategy compiles a training step."""
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(3, 3, 4, 6)).astype(np.float32)
    bias = rng.normal(size=6).astype(np.float32)
    gradients = [
        (rng.normal(size=kernel.shape).astype(np.float32), rng.normal(size=6).astype(np.float32))
        for _ in range(2)
    ]
    shape = (0.5, 0.5, 0.0)
    sgd_schedule, filter_schedule = model.one_cycle(0.05, 4, shape), model.one_cycle(0.2, 4, shape)
    saved = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        conv = keras.layers.Conv2D(6, 3, use_bias=False)
        conv.build((None, 8, 8, 4))
        conv.kernel.assign(kernel)
        variable = tf.Variable(bias)
        optimizer = muon.Muon(sgd_schedule, filter_schedule, 0.85, 0.6, weight_decay=0.01)
        optimizer.build([conv.kernel, variable])  # its slots exist before any compiled step

        def step(kernel_gradient, bias_gradient):
            optimizer.apply_gradients([(kernel_gradient, conv.kernel), (bias_gradient, variable)])

        if xla:
            step = tf.function(step, jit_compile=True)
        for kernel_gradient, bias_gradient in gradients:
            step(tf.constant(kernel_gradient), tf.constant(bias_gradient))
        got = conv.kernel.numpy(), variable.numpy()
    finally:
        keras.mixed_precision.set_global_policy(saved)
    expected = reference_steps(
        kernel,
        bias,
        gradients,
        [float(filter_schedule(s)) for s in (0, 1)],
        [float(sgd_schedule(s)) for s in (0, 1)],
        0.01,
    )
    return got, expected


def test_update_matches_a_numpy_reference_of_the_same_steps():
    (kernel, bias), (expected_kernel, expected_bias) = _two_steps("float32")
    np.testing.assert_allclose(kernel, expected_kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bias, expected_bias, rtol=1e-5, atol=1e-6)


def test_the_update_compiles_with_xla_and_matches_the_reference():
    """TPUStrategy compiles the whole step with XLA: Muon's update must compile, and give the
    same weights (on the CPU's XLA; a TPU's matmul precision is not checked here)."""
    (kernel, bias), (expected_kernel, expected_bias) = _two_steps("float32", xla=True)
    np.testing.assert_allclose(kernel, expected_kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bias, expected_bias, rtol=1e-5, atol=1e-6)


def test_newton_schulz_runs_in_float32_under_mixed_bfloat16():
    """bf16 iterations would be off by about 1e-2 (8 bits of mantissa); float32 by 1e-6."""
    (kernel, _), (expected_kernel, _) = _two_steps("mixed_bfloat16")
    assert kernel.dtype == np.float32
    np.testing.assert_allclose(kernel, expected_kernel, rtol=1e-4, atol=1e-5)


def test_the_recipe_selects_muon_for_filters_only():
    recipe = dataclasses.replace(model.RECIPES["airbench"], optimizer="muon")
    images = np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3)).astype(np.uint8)
    network = model.build(recipe, model.stem_filters(recipe, images))
    model.compile_model(network, recipe, 1.0, steps_per_epoch=4, epochs=1)
    assert isinstance(network.optimizer, muon.Muon)
    filters = [v for v in network.trainable_variables if muon.is_filter(v)]
    assert len(filters) == 6  # two per block; the frozen stem is not trainable here
    assert all(not network.optimizer._use_weight_decay(v) for v in filters)
    assert network.optimizer._use_weight_decay(network.get_layer("head").kernel)


# Eight replicas of a small airbench, each fed different images, a few Muon steps; then every
# trainable variable's copy on every replica. Then one step with a different gradient on
# each replica.
MIRRORED_MUON = textwrap.dedent("""
    import dataclasses, json
    import numpy as np
    import components
    from components.trainer import model, muon, strategy
    from components.trainer.keras import keras, tf
    strategy.configure_cpu_replicas(8)
    mirrored = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(8)])
    recipe = dataclasses.replace(model.RECIPES["airbench"], optimizer="muon", widths=(8, 16, 16))
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (256, 32, 32, 3)).astype(np.uint8)
    labels = rng.integers(0, 10, 256)
    with mirrored.scope():
        network = model.build(recipe, model.stem_filters(recipe, images))
        model.compile_model(network, recipe, 1.0, steps_per_epoch=4, epochs=1)
    start = [v.numpy() for v in network.trainable_variables]
    network.fit(tf.data.Dataset.from_tensor_slices((images, labels)).batch(64), epochs=1, verbose=0)
    report = {"differ": [], "moved": 0}
    for v, before in zip(network.trainable_variables, start):
        copies = [c.numpy() for c in mirrored.experimental_local_results(v)]
        assert len(copies) == 8
        if any(not np.array_equal(copies[0], c) for c in copies[1:]):
            report["differ"].append(v.name)
        report["moved"] += int(not np.allclose(copies[0], before))
    # Each replica hands the optimizer its own gradient: the step must orthogonalise their sum
    # (what Keras' all-reduce gives it), the same on every replica.
    gradients = rng.normal(size=(8, 3, 3, 2, 4)).astype(np.float32)
    with mirrored.scope():
        kernel = tf.Variable(rng.normal(size=(3, 3, 2, 4)).astype(np.float32))
        optimizer = muon.Muon(0.0, 0.1)
        optimizer.build([kernel])
    before = kernel.numpy()

    @tf.function
    def step():
        def apply():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply_gradients([(tf.gather(tf.constant(gradients), replica), kernel)])
        mirrored.run(apply)

    step()
    report["before"], report["summed_gradient"] = before.tolist(), gradients.sum(0).tolist()
    report["after"] = [c.numpy().tolist() for c in mirrored.experimental_local_results(kernel)]
    print(json.dumps(report))
""")


@pytest.mark.integration
def test_muon_keeps_every_mirrored_replica_identical():
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED_MUON],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["differ"] == []
    assert report["moved"] >= 6  # the filters (and biases, head) trained
    before, summed = np.array(report["before"]), np.array(report["summed_gradient"])
    expected = before * 2.0 / np.linalg.norm(before)  # sqrt(4 output filters)
    expected -= 0.1 * reference_newton_schulz(summed.reshape(-1, 4)).reshape(before.shape)
    after = np.array(report["after"])
    assert len(after) == 8 and all(np.array_equal(after[0], copy) for copy in after[1:])
    np.testing.assert_allclose(after[0], expected, rtol=1e-4, atol=1e-5)


# One Muon step under MultiWorkerMirroredStrategy, each worker with its own gradient.
MULTI_WORKER_STEP = textwrap.dedent("""
    import json
    import numpy as np
    import components
    from components.trainer import muon
    from components.trainer.keras import tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = json.loads(__import__("os").environ["TF_CONFIG"])["task"]["index"]
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 3, 2, 4)).astype(np.float32)
    gradients = rng.normal(size=(2, 3, 3, 2, 4)).astype(np.float32)
    with strategy.scope():
        kernel = tf.Variable(start)
        optimizer = muon.Muon(0.0, 0.1)
        optimizer.build([kernel])

    @tf.function
    def step():
        strategy.run(lambda: optimizer.apply_gradients([(tf.constant(gradients[worker]), kernel)]))

    step()
    print(json.dumps({"before": start.tolist(), "summed_gradient": gradients.sum(0).tolist(),
                      "after": kernel.numpy().tolist()}))
""")


@pytest.mark.multi_worker
def test_muon_orthogonalises_the_all_reduced_gradient_on_two_workers():
    from components.trainer import local_workers

    ports = local_workers.free_ports(2)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", MULTI_WORKER_STEP],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "CUDA_VISIBLE_DEVICES": "",
                "TF_CONFIG": local_workers.tf_config(ports, index),
            },
        )
        for index in (0, 1)
    ]
    reports = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=300)
        assert worker.returncode == 0, stderr[-3000:]
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    before, summed = np.array(reports[0]["before"]), np.array(reports[0]["summed_gradient"])
    expected = before * 2.0 / np.linalg.norm(before)
    expected -= 0.1 * reference_newton_schulz(summed.reshape(-1, 4)).reshape(before.shape)
    assert reports[0]["after"] == reports[1]["after"]
    np.testing.assert_allclose(np.array(reports[0]["after"]), expected, rtol=1e-4, atol=1e-5)
