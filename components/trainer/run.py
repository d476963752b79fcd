"""TFX Trainer entry point: `run_fn` adapts FnArgs to the training plan and loop
(`train.py`), the export (`export.py`) and the training summary, and leaves no
process-wide setting changed behind it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time

import numpy as np
from absl import logging
from tfx.components.trainer.fn_args_utils import FnArgs

from components.contract import TRAINING_SUMMARY_FILE
from components.serving import warmup
from components.trainer import data, export, flops, model, train, warm_start
from components.trainer.callbacks import checkpoint_dir
from components.trainer.config import CHECKPOINT_ROOT_KEY, SERVING_MODEL_NAME_KEY, TrainingConfig
from components.trainer.keras import keras, tf
from components.trainer.training_summary import TrainingSummary


def run_fn(fn_args: FnArgs) -> None:
    """Trains and exports. Under MultiWorkerMirroredStrategy every worker runs this with its
    own TF_CONFIG (TFX's Vertex trainer runs it in every worker pool; `run --workers N` in
    N local processes): each trains on its shard, and only the chief exports the model and
    writes the training summary."""
    started = time.time()
    config = TrainingConfig.from_trainer_custom_config(fn_args.custom_config)
    config, source, note = _warm_start(config, fn_args.base_model)
    run = train.plan(config)
    worker = run.worker
    with train.process_settings(run.precision.policy, config.seed):
        shard = data.load_shard(fn_args.train_files, worker.index, worker.count)
        split = {"train": (shard.images, shard.labels), "eval": data.load_split(fn_args.eval_files)}
        load_seconds = time.time() - started
        backup_dir = checkpoint_dir(
            (fn_args.custom_config or {}).get(CHECKPOINT_ROOT_KEY, ""),
            fn_args.model_run_dir,
            fn_args.train_files,
            config,
        )
        fitted = train.fit(
            run,
            split,
            backup_dir,
            fn_args.model_run_dir,
            train_total=shard.total,
            whitening_sample=data.first_images(fn_args.train_files, 5000),
            warm_start_from=source,
        )
        allreduce = train.allreduce_seconds(run, fitted.network)
        export_started = time.time()
        serving_network = export.float32_copy(fitted.network, fitted.build)
        logging.info(
            "Worker %d of %d: final weights sha256 %s",
            worker.index,
            worker.count,
            weights_digest(serving_network),
        )
        if worker.is_chief:  # the chief exports and reports; the others leave nothing
            module = export.export_serving_model(
                serving_network, fn_args.serving_model_dir, run.recipe.test_time_augmentation
            )
            # The shift baselines on the reference images, which a warm start carries
            # forward: a version fine-tuned on a small span keeps enough of them.
            kept = export.write_reference_images(
                fn_args.base_model, *split["eval"], fn_args.serving_model_dir
            )
            export.write_label_reference(
                serving_network,
                *split["eval"],
                fn_args.serving_model_dir,
                shift_images=kept.images,
            )
            export.write_warmup_requests(
                module, kept.images, fn_args.serving_model_dir, _model_name(fn_args)
            )
            if source is not None:
                warm_start.record_lineage(fn_args.serving_model_dir, source)
        export_seconds = time.time() - export_started
        # TFX's executor checks on every worker that the model exists: the others return
        # only once the chief has written it (to the job's shared output, e.g. gs://).
        train.barrier(run)
        if not worker.is_chief:
            tf.io.gfile.rmtree(train.scratch_dir(backup_dir, worker))
            return
    tf.io.gfile.rmtree(backup_dir)  # the model is exported: nothing left to resume
    summary = _summary(run, fitted, shard.total, int(split["eval"][0].shape[0]), serving_network)
    summary = dataclasses.replace(
        summary,
        allreduce_seconds=None if allreduce is None else round(allreduce, 4),
        load_seconds=round(load_seconds, 1),
        export_seconds=round(export_seconds, 1),
        trainer_seconds=round(time.time() - started, 1),
        warm_start_source=source.served_version_dir if source else None,
        warm_start_note=note,
    )
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, TRAINING_SUMMARY_FILE), "w") as f:
        json.dump(summary.to_json(), f, indent=1)
    logging.info("Training summary: %s", summary)


def _warm_start(config: TrainingConfig, base_model: str | None):
    """(the config to train with, the served model to start from or None, why not): with
    --warm-start and a served model whose network fits this recipe, its fine-tuning
    schedule; otherwise the config as given, from scratch."""
    if not config.warm_start:
        return config, None, ""
    source, note = warm_start.served_source(base_model)
    if source is not None:
        note = warm_start.fits(lambda: model.build(model.RECIPES[config.model]), source)
        source = None if note else source
    if source is None:
        logging.warning("Warm start asked for, training from scratch: %s", note)
        return config, None, note
    tuned = warm_start.fine_tuning(config)
    logging.info(
        "Warm start from %s: %d epochs at learning rate %g",
        source.served_version_dir,
        tuned.epochs,
        tuned.learning_rate,
    )
    return tuned, source, ""


def _model_name(fn_args: FnArgs) -> str:
    """The serving folder's model name, for the warmup records' ModelSpec."""
    return (fn_args.custom_config or {}).get(SERVING_MODEL_NAME_KEY) or warmup.DEFAULT_MODEL_NAME


def weights_digest(network: keras.Model) -> str:
    """sha256 of every weight's bytes, in order: equal on workers that trained in step."""
    digest = hashlib.sha256()
    for weight in network.get_weights():
        digest.update(np.ascontiguousarray(weight).tobytes())
    return digest.hexdigest()


def _summary(
    run: train.Plan,
    fitted: train.Fitted,
    train_records: int,
    eval_records: int,
    serving_network: keras.Model,
) -> TrainingSummary:
    """The summary's training facts; the caller fills in the timings."""
    forward_flops = flops.forward_flops_per_image(serving_network)
    images_seen = run.epochs * fitted.steps_per_epoch * run.global_batch_size
    return TrainingSummary(
        model=run.config.model,
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
        train_records=train_records,
        eval_records=eval_records,
        forward_flops_per_image=forward_flops,
        training_images_seen=images_seen,
        training_flops=flops.training_flops(forward_flops, images_seen),
        load_seconds=0.0,
        fit_seconds=round(fitted.fit_seconds, 1),
        export_seconds=0.0,
        trainer_seconds=0.0,
        final_eval_accuracy_without_tta=(
            fitted.history[-1].get("val_accuracy") if fitted.history else None
        ),
        workers=run.worker.count,
        steps_per_epoch=fitted.steps_per_epoch,
        step_seconds=fitted.step_seconds,
        gradient_bytes=train.gradient_bytes(fitted.network),
    )
