"""Trains one model on in-memory arrays from a CIFAR-10 source and prints eval accuracy
per epoch with elapsed seconds: the quick loop used to pick the default recipe."""

import argparse
import json
import time

import numpy as np

from components.cifar10_example_gen.sources import load_arrays
from components.trainer import data, model
from components.trainer.hardware import decide_precision, detect
from components.trainer.keras import keras, tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="airbench")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--widths", default="32,64,128")
    parser.add_argument(
        "--precision", default="auto", help="auto: what the Trainer would choose on this machine"
    )
    parser.add_argument("--wd", type=float, help="override the recipe's weight decay")
    parser.add_argument("--limit", type=int, default=0, help="train on the first N images")
    args = parser.parse_args()

    keras.mixed_precision.set_global_policy(decide_precision(args.precision, detect("cpu")).policy)
    started = time.time()
    arrays = load_arrays(args.data)
    (x_train, y_train), (x_eval, y_eval) = arrays["train"], arrays["eval"]
    if args.limit:
        x_train, y_train = x_train[: args.limit], y_train[: args.limit]
    print(f"loaded {len(x_train)} train / {len(x_eval)} eval in {time.time() - started:.1f}s")
    recipe = model.RECIPES[args.model]
    if args.wd is not None:
        import dataclasses

        recipe = dataclasses.replace(recipe, weight_decay=args.wd)
    epochs = args.epochs or recipe.epochs
    batch = args.batch or recipe.per_replica_batch_size
    if args.model == "airbench":
        widths = tuple(int(w) for w in args.widths.split(","))
        net = model.build_airbench(widths, model.whitening_filters(x_train[:5000]))
    else:
        net = model.build_seed_cnn()
    steps = len(x_train) // batch
    model.compile_model(
        net, recipe, model.scaled_learning_rate(recipe, batch, args.lr), steps, epochs
    )
    train = data.training_dataset(tf.constant(x_train), tf.constant(y_train), batch)
    evals = data.evaluation_dataset(tf.constant(x_eval), tf.constant(y_eval), 1000)
    fit_start = time.time()

    class Log(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            flipped = np.flip(x_eval, axis=2)
            logits = net.predict(x_eval, batch_size=1000, verbose=0) + net.predict(
                flipped, batch_size=1000, verbose=0
            )
            tta = float(np.mean(np.argmax(logits, 1) == y_eval))
            print(
                json.dumps(
                    {
                        "epoch": epoch + 1,
                        "elapsed_s": round(time.time() - fit_start, 1),
                        "train_acc": round(logs["accuracy"], 4),
                        "val_acc": round(logs["val_accuracy"], 4),
                        "val_acc_tta": round(tta, 4),
                    }
                ),
                flush=True,
            )

    net.fit(train, epochs=epochs, validation_data=evals, callbacks=[Log()], verbose=0)
    print(f"fit took {time.time() - fit_start:.1f}s")


if __name__ == "__main__":
    main()
