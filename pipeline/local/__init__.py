"""The pipeline on this machine: LocalDagRunner, Beam's DirectRunner, SQLite metadata; the run's
facts (`run_summary.json`), its console summary and HTML report, and `predict` on its pushes."""
