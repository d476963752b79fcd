"""Serving: what makes a version fit for TF Serving before anyone sees it: the warmup
records written into each export (`warmup`) and the load test that replays them in a fresh
process before the Pusher commits (`load_test`).
Independent of `components.checks`; may import storage, the runtime and the contract.
"""
