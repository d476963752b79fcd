"""Checks: the model-aware tests a new span must pass, shared by the Trainer (which keeps
what the checks compare against) and the data gate and served-state components (which run
them): drift of the served model's scores (`drift`), agreement with the labels
(`label_agreement`), the reference images the Evaluator scores both models on
(`reference_images`) and how a model scores a batch of records (`model_scoring`).
Independent of `components.serving`; may import what lies below (storage, the runtime, the
contract), though today it needs only the contract.
"""
