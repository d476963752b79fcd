"""Custom TFX components and the Trainer module of the CIFAR-10 pipeline."""
