"""Vertex AI's Trainer (a CustomJob, e.g. on a Cloud TPU), passing a night with nothing new
through without starting a job. Imported only when compiling for Vertex:
google-cloud-aiplatform takes seconds to import."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_executor
from tfx.extensions.google_cloud_ai_platform.trainer.component import Trainer

from components.trainer.nothing_new import nothing_new, pass_through


class Executor(vertex_executor.GenericExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        reason = nothing_new(input_dict)
        if reason is not None:
            return pass_through(output_dict, reason)
        return super().Do(input_dict, output_dict, exec_properties)


class VertexTrainer(Trainer):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
