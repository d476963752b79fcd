"""Runs a compiled pipeline file under KFP's own local orchestrator (`kfp.local`), each
container step a process on this machine, before an image is built or a run submitted.

It runs in its own environment (`.venv-kfp`, `make setup-kfp`): a current kfp SDK needs
protobuf >= 6, TFX 1.16 < 5. `cifar10-pipeline local-kfp` starts it as
`python -m pipeline.kfp_local`; every step then runs in the project's environment (`--python`)
with the Dockerfile's ENV, in the Dockerfile's WORKDIR mapped to the checkout. So this module
imports nothing that imports TFX (pyproject.toml's import-linter contracts).
"""
