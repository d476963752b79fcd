"""`make bench` and the probes it runs, from the checkout (`python -m benchmarks.bench`)."""
