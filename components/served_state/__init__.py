"""ServedState: what is served when a run starts, read once by the run's first step (no
Resolver) and handed to every later step; and the Evaluator that takes it as its baseline."""
