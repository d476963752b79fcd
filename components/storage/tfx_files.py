"""Where TFX's standard components leave their files, from TFX's own utilities rather than
restated paths: an artifact's split folder, StatisticsGen's statistics and ExampleValidator's
anomalies. The validation gate, the run summary and the report all find them here. TFX is
imported when called: the light CLI paths import this module's callers without it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfx.types.artifact import Artifact


def split_uri(artifact: Artifact | str, split: str) -> str:
    """The folder of `split` in an artifact, or in one known only by its URI (the run
    summary keeps URIs)."""
    from tfx.types import artifact_utils, standard_artifacts

    if isinstance(artifact, str):
        uri, artifact = artifact, standard_artifacts.Examples()
        artifact.uri = uri
        artifact.split_names = artifact_utils.encode_split_names([split])
    return artifact_utils.get_split_uri([artifact], split)


def statistics_file(artifact: Artifact | str, split: str) -> str:
    """StatisticsGen's binary statistics (DatasetFeatureStatisticsList) of one split."""
    from tfx.components.statistics_gen.executor import DEFAULT_FILE_NAME

    return os.path.join(split_uri(artifact, split), DEFAULT_FILE_NAME)


def anomalies_file(artifact: Artifact | str, split: str) -> str:
    """ExampleValidator's anomalies (Anomalies proto) of one split."""
    from tfx.components.example_validator.executor import DEFAULT_FILE_NAME

    return os.path.join(split_uri(artifact, split), DEFAULT_FILE_NAME)
