"""DataValidationGate: TFDV's anomalies and the checks of `checks.py`; bad data stops the run
before training."""
