"""Muon for the convolution filters, Nesterov SGD for everything else, in one Keras 2
optimizer (the update of airbench94_muon, KellerJordan/cifar10-airbench).

A filter bank [k, k, in, out] is one matrix [k*k*in, out]: the transpose of PyTorch's
[out, in*k*k] with its columns permuted, which orthogonalisation commutes with. Each step:

1. the filter's Nesterov momentum, buffer = momentum x buffer + gradient, and the step
   direction gradient + momentum x buffer;
2. the filters rescaled to a Frobenius norm of sqrt(out) (each output filter of unit norm
   on average), so that their scale never drifts and the step size is relative;
3. the direction orthogonalised by a few quintic Newton-Schulz iterations (singular values
   pushed to roughly 0.5-1.5), always in float32, whatever the Keras precision policy;
4. filters -= filter learning rate x that.

Filters take no weight decay (their norm is fixed anyway). Every other trainable variable
(BatchNorm biases, the head) takes Keras' own Nesterov SGD with decoupled weight decay,
exactly as `keras.optimizers.SGD` does.

Under MirroredStrategy, MultiWorkerMirroredStrategy and TPUStrategy, Keras all-reduces the
gradients before `update_step`, which then runs on each replica's copy of a variable with
the same reduced gradient: orthogonalising it is the same code on every strategy, and
every replica computes the same update from the same numbers.
"""

from __future__ import annotations

from components.trainer.keras import keras, tf

# The quintic iteration's coefficients in airbench94_muon (chosen to maximise the slope at
# zero, so that few iterations suffice; it converges to singular values near 1, not to 1).
NEWTON_SCHULZ_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
EPSILON = 1e-7


def newton_schulz(matrix: tf.Tensor, steps: int = 3) -> tf.Tensor:
    """An approximately orthogonal matrix with the singular vectors of `matrix`, in float32.

    The matrix is first scaled to unit Frobenius norm (so every singular value is <= 1),
    and iterated on its wide orientation (rows <= columns): X <- aX + (bA + cA^2)X with
    A = XX^T."""
    a, b, c = NEWTON_SCHULZ_COEFFICIENTS
    x = tf.cast(matrix, tf.float32)
    x = x / (tf.norm(x) + EPSILON)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = tf.transpose(x)
    for _ in range(steps):
        gram = tf.matmul(x, x, transpose_b=True)
        x = a * x + tf.matmul(b * gram + c * tf.matmul(gram, gram), x)
    return tf.transpose(x) if tall else x


def is_filter(variable: tf.Variable) -> bool:
    """Convolution filter banks ([k, k, in, out]) are trained by Muon."""
    return len(variable.shape) == 4


def newton_schulz_flops(shape: tuple[int, ...], steps: int = 3) -> int:
    """Floating-point operations of orthogonalising one filter bank of `shape` (a
    multiply-add counting 2): per iteration XX^T (2 m^2 n), A^2 (2 m^3) and the product
    with X (2 m^2 n), for the wide orientation m <= n."""
    columns = int(shape[-1])
    rows = 1
    for size in shape[:-1]:
        rows *= int(size)
    m, n = min(rows, columns), max(rows, columns)
    return steps * (4 * m * m * n + 2 * m**3)


class Muon(keras.optimizers.SGD):
    """Keras' Nesterov SGD for every variable but the convolution filters, which take the
    Muon step of the module docstring at `filter_learning_rate` (a float or a schedule of
    the step, as `learning_rate` is) with momentum `filter_momentum`."""

    def __init__(
        self,
        learning_rate,
        filter_learning_rate,
        momentum: float = 0.85,
        filter_momentum: float = 0.6,
        newton_schulz_steps: int = 3,
        nesterov: bool = True,
        weight_decay: float | None = None,
        name: str = "Muon",
        **kwargs,
    ):
        super().__init__(
            learning_rate,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=weight_decay,
            name=name,
            **kwargs,
        )
        self.filter_learning_rate = filter_learning_rate
        self.filter_momentum = filter_momentum
        self.newton_schulz_steps = newton_schulz_steps

    def _current_filter_learning_rate(self) -> tf.Tensor:
        rate = self.filter_learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return tf.cast(rate(self.iterations), tf.float32)
        return tf.constant(rate, tf.float32)

    def _use_weight_decay(self, variable) -> bool:
        return not is_filter(variable) and super()._use_weight_decay(variable)

    def update_step(self, gradient, variable):
        if not is_filter(variable):
            return super().update_step(gradient, variable)
        buffer = self.momentums[self._index_dict[self._var_key(variable)]]
        gradient = tf.cast(gradient, tf.float32)
        momentum = tf.constant(self.filter_momentum, tf.float32)
        buffer.assign(momentum * buffer + gradient)
        direction = gradient + momentum * buffer if self.nesterov else buffer
        weights = tf.cast(variable, tf.float32)
        out = variable.shape[-1]
        weights = weights * (tf.sqrt(float(out)) / (tf.norm(weights) + EPSILON))
        matrix = tf.reshape(direction, [-1, out])
        update = tf.reshape(newton_schulz(matrix, self.newton_schulz_steps), variable.shape)
        variable.assign(weights - self._current_filter_learning_rate() * update)

    def get_config(self):
        rate = self.filter_learning_rate
        return {
            **super().get_config(),
            "filter_learning_rate": self._serialize_hyperparameter(rate)
            if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule)
            else rate,
            "filter_momentum": self.filter_momentum,
            "newton_schulz_steps": self.newton_schulz_steps,
        }
