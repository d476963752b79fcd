"""Vertex AI's Trainer (a CustomJob, e.g. on a Cloud TPU), passing a night with nothing new
through without starting a job. Imported only when compiling for Vertex:
google-cloud-aiplatform takes seconds to import."""

from __future__ import annotations

from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_executor
from tfx.extensions.google_cloud_ai_platform.trainer.component import Trainer

from components.trainer.nothing_new import PassThrough


class Executor(PassThrough, vertex_executor.GenericExecutor):
    """Vertex's Trainer executor, passing a night with nothing new through."""


class VertexTrainer(Trainer):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
