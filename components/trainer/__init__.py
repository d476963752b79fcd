"""The TFX Trainer's module: `run.run_fn` adapts FnArgs to the model (`model`), its input
(`data`), the strategy (`strategy`, `hardware`), the loop (`train`) and the export (`export`)."""
