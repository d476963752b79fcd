"""NightReport: the exit handler of a compiled file (pipeline/kfp_ir.py sets it on the runner;
the local DAG has none, `run` reports from the CLI). It runs after the pipeline's steps,
whether they succeeded or one failed, with the run's final status."""

from tfx import v1 as tfx

from components.night_report.handler import report_night


@tfx.orchestration.experimental.exit_handler
def NightReport(
    final_status: tfx.dsl.components.Parameter[str],
    serving_model_dir: tfx.dsl.components.Parameter[str],
    night_key: tfx.dsl.components.Parameter[str],
    runner: tfx.dsl.components.Parameter[str],
    notify_secret: tfx.dsl.components.Parameter[str] = "",
):
    """Composes, keeps and delivers the night's message; never fails the run."""
    try:
        report_night(final_status, serving_model_dir, night_key, runner, notify_secret)
    except Exception as err:
        print(f"warning: the night's report failed: {type(err).__name__}: {err}")
