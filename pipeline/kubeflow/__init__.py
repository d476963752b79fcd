"""Open-source Kubeflow Pipelines 2.x: `compile --target kubeflow` (the Trainer in its own pod) and
`submit` through the kfp SDK's Client."""
