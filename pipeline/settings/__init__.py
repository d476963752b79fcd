"""What a run is configured with: the frozen PipelineConfig, where the data comes from, Cloud TPU
names and the Vertex worker pools they map to. Read by the topology and every target."""
