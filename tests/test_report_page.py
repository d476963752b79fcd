"""The report page is rendered with autoescaping: text from a run (an error message, a run
id) shows as text and can never become markup. Fast: a run that stopped before training."""

from pipeline.report import build_report
from pipeline.summary import RunSummary


def test_a_stopped_run_renders_with_its_values_escaped(tmp_path):
    RunSummary(
        run_id="<b>run</b>",
        record_counts={},
        stage_seconds={"Cifar10ExampleGen": 1.5},
        stage_states={"Cifar10ExampleGen": "failed"},
        artifacts={},
        failed="SourceError: <script>alert(1)</script>",
    ).write(tmp_path)
    page = build_report(tmp_path).read_text()
    assert "<script>" not in page and "<b>run</b>" not in page
    assert "<li>the run failed: SourceError: &lt;script&gt;alert(1)&lt;/script&gt;</li>" in page
    assert "<title>CIFAR-10 run &lt;b&gt;run&lt;/b&gt;</title>" in page
    assert "<p class='bad'>not evaluated</p>" in page
    assert "<td>Cifar10ExampleGen</td><td>1.5</td><td>failed</td>" in page
    assert "<p>The Trainer did not run.</p>" in page
    assert "<p>The Evaluator did not run.</p>" in page
