"""CIFAR-10 TFX pipeline: topology, configuration, runners and CLI."""
