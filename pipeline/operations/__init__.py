"""The days after a push: rollback, the served model's status, each night's report."""
