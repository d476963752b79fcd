"""`python -m pipeline.cli`: the same as the `cifar10-pipeline` entry point."""

import sys

from pipeline.cli import main

sys.exit(main())
