"""The report page is rendered with autoescaping: text from a run (an error message, a run
id) shows as text and can never become markup. Fast: a run that stopped before training."""

from pipeline.local.report import build_report
from pipeline.local.summary import RunSummary


def _page(tmp_path, run_id: str, stage: str, state: str, **facts) -> str:
    """The report of a run of one stage, with `facts` on top."""
    RunSummary(
        run_id=run_id,
        record_counts={},
        stage_seconds={stage: 1.5},
        stage_states={stage: state},
        artifacts={},
        **facts,
    ).write(tmp_path)
    return build_report(tmp_path).read_text()


def test_a_stopped_run_renders_with_its_values_escaped(tmp_path):
    page = _page(
        tmp_path,
        "<b>run</b>",
        "Cifar10ExampleGen",
        "failed",
        failed="SourceError: <script>alert(1)</script>",
    )
    assert "<script>" not in page and "<b>run</b>" not in page
    assert "<li>the run failed: SourceError: &lt;script&gt;alert(1)&lt;/script&gt;</li>" in page
    assert "<title>CIFAR-10 run &lt;b&gt;run&lt;/b&gt;</title>" in page
    assert "<p class='bad'>not evaluated</p>" in page
    assert "<td>Cifar10ExampleGen</td><td>1.5</td><td>failed</td>" in page
    assert "<p>The Trainer did not run.</p>" in page
    assert "<p>The Evaluator did not run.</p>" in page


def test_the_epoch_table_says_which_epochs_were_scored_on_part_of_the_eval_split(tmp_path):
    history = [
        {"epoch": 1, "seconds": 9.0, "loss": 1.7, "accuracy": 0.5, "val_accuracy": 0.53,
         "val_fraction": 0.2, "learning_rate": 0.5},
        {"epoch": 2, "seconds": 9.0, "loss": 1.2, "accuracy": 0.8, "val_accuracy": 0.83,
         "val_fraction": 1.0, "learning_rate": 0.1},
    ]  # fmt: skip
    page = _page(tmp_path, "run", "Trainer", "complete", history=history)
    assert "<td>0.5300 (on 20% of it)</td>" in page
    assert "<td>0.8300</td>" in page


def test_the_labels_the_served_model_doubts_are_shown_as_thumbnails(tmp_path):
    """The gate's suspects, read back from the run's train split by record id."""
    import numpy as np

    import cifar_fixtures as fx

    examples = tmp_path / "examples"
    (examples / "Split-train").mkdir(parents=True)
    fx.write_split(examples / "Split-train" / "data.gz", np.array([3, 5, 3]), seed=1)
    suspects = [
        {"record_id": "fixture:1", "given": "dog", "predicted": "cat", "confidence": 0.97},
        {"record_id": "gone", "given": "cat", "predicted": "dog", "confidence": 0.9},
    ]
    comparison = {
        "skew": {"skipped": "no eval split"},
        "drift": {"skipped": "no served model"},
        "drift_accepted": False,
        "labels": {"suspects": suspects, "skipped": ""},
    }
    RunSummary(
        run_id="run",
        record_counts={},
        stage_seconds={"DataValidationGate": 1.0},
        stage_states={"DataValidationGate": "failed"},
        artifacts={"examples": str(examples)},
        data_comparison=comparison,
    ).write(tmp_path)
    page = build_report(tmp_path).read_text()
    assert "<h3>Labels the served model believes least</h3>" in page
    assert page.count('<img class="tile" src="data:image/png;base64,') == 1 + 3  # + samples
    assert 'alt="dog? model: cat 97%"' in page and "gone" not in page
