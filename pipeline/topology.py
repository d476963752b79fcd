"""The pipeline's DAG, the same for every runner: `create_pipeline(config)`.

Ingest -> statistics -> curated schema -> validation -> gate -> train -> evaluate
(against the accuracy gate and the model currently served) -> push. Where a runner
differs (the Vertex-backed Trainer and Pusher, Dataflow, the Kubeflow Trainer pod's
resources), `config` says so; the components and their wiring do not change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfx.components import ExampleValidator, StatisticsGen
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.orchestration import metadata as tfx_metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.proto import trainer_pb2

from components.atomic_pusher.component import AtomicPusher
from components.cifar10_example_gen.component import Cifar10ExampleGen
from components.contract import (
    EVAL_SPLIT,
    EVALUATOR_NODE,
    EXAMPLES_SIGNATURE,
    LABEL_KEY,
    PROBABILITIES_KEY,
    PUSHER_NODE,
    TRAIN_SPLIT,
    TRAINER_NODE,
)
from components.runtime import stack
from components.served_state.component import ServedBaselineEvaluator, ServedState
from components.trainer.config import (
    CHECKPOINT_ROOT_KEY,
    LOCAL_WORKERS_KEY,
    SERVING_MODEL_NAME_KEY,
)
from components.trainer.config import CUSTOM_CONFIG_KEY as TRAINING_CONFIG_KEY
from components.trainer.local_workers import MultiWorkerTrainer
from components.trainer.nothing_new import PassThroughTrainer
from components.validation_gate.comparison import statistics_options
from components.validation_gate.component import DataValidationGate
from pipeline.settings.config import KubeflowConfig, PipelineConfig, VertexConfig
from pipeline.settings.worker_pools import worker_pool_specs

if TYPE_CHECKING:
    from tensorflow_model_analysis.proto.config_pb2 import EvalConfig

RUN_FN = "components.trainer.run.run_fn"

# Vertex's prebuilt CPU serving container for TF 2.16 SavedModels.
VERTEX_SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-16:latest"


def eval_config(accuracy_gate: float, max_regression: float) -> EvalConfig:
    """Overall accuracy must clear the absolute gate and must not regress against the
    baseline. One slice, the whole eval split: per-class accuracy is read off the confusion
    matrix plot (reported, not gated), where a second slice by label cost the Evaluator
    seconds of TFMA's per-record Python."""
    tfma = stack.tfma_config()
    accuracy = tfma.MetricConfig(
        class_name="SparseCategoricalAccuracy",
        per_slice_thresholds=[
            tfma.PerSliceMetricThreshold(
                slicing_specs=[tfma.SlicingSpec()],
                threshold=tfma.MetricThreshold(
                    value_threshold=tfma.GenericValueThreshold(
                        lower_bound={"value": accuracy_gate}
                    ),
                    change_threshold=tfma.GenericChangeThreshold(
                        direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                        absolute={"value": -max_regression},
                    ),
                ),
            )
        ],
    )
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                # Stated, so TFMA does not load the SavedModel once more just to find out
                # whether it is a Keras model (it is a tf.Module with signatures).
                model_type="tf_generic",
                signature_name=EXAMPLES_SIGNATURE,
                label_key=LABEL_KEY,
                prediction_key=PROBABILITIES_KEY,
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[
            tfma.MetricsSpec(
                metrics=[
                    accuracy,
                    tfma.MetricConfig(class_name="ExampleCount"),
                    tfma.MetricConfig(class_name="MultiClassConfusionMatrixPlot"),
                ]
            )
        ],
    )


def _vertex_training_args(vertex: VertexConfig) -> dict:
    """Vertex CustomJob: a Cloud TPU, or CPU/GPU workers, running this project's image, as
    the configured service account on the configured network, with the configured labels."""
    job_spec: dict = {"worker_pool_specs": worker_pool_specs(vertex)}
    if vertex.service_account:
        job_spec["service_account"] = vertex.service_account
    if vertex.network:
        job_spec["network"] = vertex.network
    from tfx.extensions.google_cloud_ai_platform import constants as vertex_constants
    from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_trainer_executor

    return {
        vertex_constants.ENABLE_VERTEX_KEY: True,
        vertex_constants.VERTEX_REGION_KEY: vertex.region,
        vertex_trainer_executor.TRAINING_ARGS_KEY: {
            "project": vertex.project,
            "job_spec": job_spec,
            "labels": dict(vertex.labels),
        },
    }


def _kubeflow_trainer_resources(kubeflow: KubeflowConfig):
    """The Trainer pod's requests, as the ResourceSpec KubeflowV2DagRunner copies into
    the Trainer's container spec."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    resources = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(
        cpu_request=kubeflow.trainer_cpu, memory_request=kubeflow.trainer_memory_gb
    )
    if kubeflow.trainer_gpus:
        resources.accelerator.type = kubeflow.gpu_resource
        resources.accelerator.count = kubeflow.trainer_gpus
    return resources


def _trainer(config: PipelineConfig, examples, schema, served_model):
    """TFX's Trainer, or Vertex's (a CustomJob on a Cloud TPU) when compiling for Vertex.
    Its base model is the served one: `run_fn` warm-starts from it when configured to."""
    trainer_args = dict(
        examples=examples,
        schema=schema,
        base_model=served_model,
        run_fn=RUN_FN,
        train_args=trainer_pb2.TrainArgs(splits=[TRAIN_SPLIT]),
        eval_args=trainer_pb2.EvalArgs(splits=[EVAL_SPLIT]),
    )
    # Checkpoints live under the pipeline root, keyed by inputs and config (not under the
    # execution's model path, which on Vertex holds the job id), so a retried Trainer resumes.
    checkpoint_root = f"{config.pipeline_root.rstrip('/')}/{TRAINER_NODE}/checkpoints"
    training_config = {
        TRAINING_CONFIG_KEY: config.training.to_custom_config(),
        CHECKPOINT_ROOT_KEY: checkpoint_root,
        SERVING_MODEL_NAME_KEY: config.model_name,
    }
    if config.vertex is not None:
        # Only here: google-cloud-aiplatform takes seconds to import, which local runs skip.
        from components.trainer.vertex_trainer import VertexTrainer

        trainer = VertexTrainer(
            **trainer_args,
            custom_config={**_vertex_training_args(config.vertex), **training_config},
        ).with_id(TRAINER_NODE)
    elif config.local_workers > 1:
        trainer = MultiWorkerTrainer(
            **trainer_args,
            custom_config={**training_config, LOCAL_WORKERS_KEY: config.local_workers},
        ).with_id(TRAINER_NODE)
    else:
        trainer = PassThroughTrainer(**trainer_args, custom_config=training_config).with_id(
            TRAINER_NODE
        )
    if config.kubeflow is not None:
        trainer.with_platform_config(_kubeflow_trainer_resources(config.kubeflow))
    return trainer


def _pusher(config: PipelineConfig, model, blessing, statistics, examples, served_model):
    """AtomicPusher into the serving folder, each version with its training data's statistics
    and spans beside it; with a Vertex endpoint, after deploying there, so that a deployment
    is a version of the serving folder too (the served state every run reads)."""
    pusher_args = dict(
        model=model,
        model_blessing=blessing,
        base_directory=config.serving_model_dir,
        statistics=statistics,
        examples=examples,
        served_model=served_model,
        keep_versions=config.keep_versions,
    )
    if config.vertex is None or not config.vertex.endpoint:
        return AtomicPusher(**pusher_args)
    from components.atomic_pusher.vertex_endpoint import VertexEndpointPusher

    serving = {
        "project": config.vertex.project,
        "region": config.vertex.region,
        "endpoint": config.vertex.endpoint,
        "image": VERTEX_SERVING_IMAGE,
        "machine_type": "n1-standard-4",
        "keep": config.vertex.endpoint_keep,
    }
    return VertexEndpointPusher(serving, **pusher_args).with_id(PUSHER_NODE)


def _span_settings(config: PipelineConfig) -> dict:
    """The ExampleGen's span choice: values, or runtime parameters with them as defaults."""
    values = {"span": config.span, "span_window": config.span_window, "force": int(config.force)}
    if not config.span_parameters:
        return values
    from tfx.orchestration import data_types

    return {
        name: data_types.RuntimeParameter(name=name, ptype=int, default=value)
        for name, value in values.items()
    }


def create_pipeline(config: PipelineConfig, night_key: str | None = None) -> tfx_pipeline.Pipeline:
    """`night_key`: compiled files' run UUID placeholder, under which the steps keep the
    night's facts for the exit handler (components/night_report); None locally."""
    # The served state, read once, first: every step that needs what is served (the
    # ExampleGen's nothing-stale rule, the gate's drift baseline, warm start, the Evaluator's
    # baseline, the Pusher's check that it is still served) reads this one artifact.
    served_state = ServedState(
        config.serving_model_dir, read_key=config.served_read_key, night_key=night_key
    )
    served_model = served_state.outputs["served_model"]
    example_gen = Cifar10ExampleGen(
        source_uri=config.source_uri,
        source_fingerprint=config.source_fingerprint,
        eval_fraction=config.eval_fraction,
        served_model=served_model,
        **_span_settings(config),
    )
    examples = example_gen.outputs["examples"]
    schema_gen = ImportSchemaGen(schema_file=config.schema_path)
    statistics_gen = StatisticsGen(
        examples=examples,
        schema=schema_gen.outputs["schema"],
        stats_options=statistics_options(),
    )
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    validation_gate = DataValidationGate(
        statistics=statistics_gen.outputs["statistics"],
        anomalies=example_validator.outputs["anomalies"],
        schema=schema_gen.outputs["schema"],
        served_model=served_model,
        examples=examples,
        accept_drift=config.accept_drift,
        accept_labels=config.accept_labels,
        accept_duplicates=config.accept_duplicates,
    )
    trainer = _trainer(config, examples, schema_gen.outputs["schema"], served_model)
    trainer.add_upstream_node(validation_gate)
    evaluator = ServedBaselineEvaluator(
        examples=examples,
        model=trainer.outputs["model"],
        baseline_model=served_model,
        example_splits=[EVAL_SPLIT],
        eval_config=eval_config(config.accuracy_gate, config.max_regression),
        max_class_drop=config.max_class_drop,
    ).with_id(EVALUATOR_NODE)
    pusher = _pusher(
        config,
        trainer.outputs["model"],
        evaluator.outputs["blessing"],
        statistics_gen.outputs["statistics"],
        examples,
        served_model,
    )

    metadata = (
        tfx_metadata.sqlite_metadata_connection_config(config.metadata_path)
        if config.metadata_path
        else None
    )
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=[
            served_state,
            example_gen,
            schema_gen,
            statistics_gen,
            example_validator,
            validation_gate,
            trainer,
            evaluator,
            pusher,
        ],
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata,
        beam_pipeline_args=list(config.beam_args),
    )
