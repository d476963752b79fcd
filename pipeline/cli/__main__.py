"""`python -m pipeline.cli`: the same as the `cifar10-pipeline` entry point."""

from pipeline.cli import entry

entry()
