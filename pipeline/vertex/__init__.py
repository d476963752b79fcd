"""Vertex AI Pipelines: `compile --target vertex` flags turned into a config and a compiled file,
and `submit` reading that file and creating a PipelineJob through google-cloud-aiplatform."""
