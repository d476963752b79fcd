"""TFX Trainer entry point: `run_fn` adapts FnArgs to the training plan and loop
(`train.py`), the export (`export.py`) and the training summary, and leaves no
process-wide setting changed behind it."""

from __future__ import annotations

import json
import os
import time

from absl import logging
from tfx.components.trainer.fn_args_utils import FnArgs

from components.contract import TRAINING_SUMMARY_FILE
from components.trainer import data, export, flops, train
from components.trainer.callbacks import checkpoint_dir
from components.trainer.config import CHECKPOINT_ROOT_KEY, TrainingConfig
from components.trainer.keras import tf
from components.trainer.training_summary import TrainingSummary


def run_fn(fn_args: FnArgs) -> None:
    started = time.time()
    config = TrainingConfig.from_trainer_custom_config(fn_args.custom_config)
    run = train.plan(config)
    with train.process_settings(run.precision.policy, config.seed):
        split = {
            "train": data.load_split(fn_args.train_files),
            "eval": data.load_split(fn_args.eval_files),
        }
        load_seconds = time.time() - started
        backup_dir = checkpoint_dir(
            (fn_args.custom_config or {}).get(CHECKPOINT_ROOT_KEY, ""),
            fn_args.model_run_dir,
            fn_args.train_files,
            config,
        )
        fitted = train.fit(run, split, backup_dir, fn_args.model_run_dir)
        export_started = time.time()
        serving_network = export.float32_copy(fitted.network, fitted.build)
        export.export_serving_model(
            serving_network, fn_args.serving_model_dir, run.recipe.test_time_augmentation
        )
        export_seconds = time.time() - export_started
    tf.io.gfile.rmtree(backup_dir)  # the model is exported: nothing left to resume
    forward_flops = flops.forward_flops_per_image(serving_network)
    images_seen = run.epochs * fitted.steps_per_epoch * run.global_batch_size
    summary = TrainingSummary(
        model=config.model,
        strategy=run.kind,
        replicas=run.replicas,
        per_replica_batch_size=run.per_replica_batch_size,
        global_batch_size=run.global_batch_size,
        epochs=run.epochs,
        resumed_from_epoch=fitted.resumed_from_epoch,
        checkpoint_fallback=fitted.checkpoint_fallback,
        learning_rate=fitted.learning_rate,
        precision=run.precision.policy,
        precision_reason=run.precision.reason,
        hardware=run.precision.hardware.to_json(),
        train_records=int(split["train"][0].shape[0]),
        eval_records=int(split["eval"][0].shape[0]),
        forward_flops_per_image=forward_flops,
        training_images_seen=images_seen,
        training_flops=flops.training_flops(forward_flops, images_seen),
        load_seconds=round(load_seconds, 1),
        fit_seconds=round(fitted.fit_seconds, 1),
        export_seconds=round(export_seconds, 1),
        trainer_seconds=round(time.time() - started, 1),
        final_eval_accuracy_without_tta=(
            fitted.history[-1].get("val_accuracy") if fitted.history else None
        ),
    )
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, TRAINING_SUMMARY_FILE), "w") as f:
        json.dump(summary.to_json(), f, indent=1)
    logging.info("Training summary: %s", summary)
