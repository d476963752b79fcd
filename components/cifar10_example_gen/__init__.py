"""Cifar10ExampleGen: the CIFAR-10 releases (or an image folder) read as untrusted bytes and
written as TFRecords (`shards`/`records`/`sources` read; `executor` is the Beam pass)."""
