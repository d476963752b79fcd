"""docs/serving.md cannot go stale: its blocks run as written, in order, in a folder laid out as
the page assumes (a pushed version under outputs/serving/cifar10, eval-0.png beside it), with
`docker`, `curl` and `gcloud` replaced by stand-ins that record their arguments. Each request
a `curl` or `gcloud` line sends is then decoded as TF Serving's REST layer decodes it
(tests/tf_serving_rest.py) and run through the pushed SavedModel's signatures: a wrong
signature, input or feature name, or a body that is not what the page says, fails here. The
documented answer must have the shape the model's answer has."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from components.contract import LABEL_NAMES

import cifar_fixtures as fx
import tf_serving_rest as rest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "serving.md"
STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["RECORDED_CALLS"], "a") as log:
    log.write(json.dumps({{"tool": {tool!r}, "argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
"""


def blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def serving_api_version() -> str:
    [version] = re.findall(
        r"^tensorflow-serving-api==(\S+)", (REPO / "requirements.lock").read_text(), re.M
    )
    return version


@pytest.fixture(scope="module")
def page_run(tmp_path_factory):
    """The page's bash blocks run in order; returns (folder, recorded calls)."""
    folder = tmp_path_factory.mktemp("serving-page")
    fx.tiny_served_model(folder / "outputs")
    fx.write_png(folder / "eval-0.png", seed=4)
    (folder / ".venv").symlink_to(sys.prefix)  # the environment running the tests
    tools = folder / "stand-ins"
    tools.mkdir()
    for tool in ("docker", "curl", "gcloud"):
        script = tools / tool
        script.write_text(STAND_IN.format(python=sys.executable, tool=tool))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    calls = folder / "calls.jsonl"
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "RECORDED_CALLS": str(calls)}
    for block in blocks("bash"):
        done = subprocess.run(
            ["bash", "-e", "-c", block], cwd=folder, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{block}\n{done.stderr[-3000:]}"
    return folder, [json.loads(line) for line in calls.read_text().splitlines()]


@pytest.fixture(scope="module")
def signatures(page_run):
    import tensorflow as tf

    folder, _ = page_run
    return tf.saved_model.load(str(folder / "outputs" / "serving" / "cifar10" / "1")).signatures


def _calls(page_run, tool: str) -> list[list[str]]:
    return [call["argv"] for call in page_run[1] if call["tool"] == tool]


def _curl_request(argv: list[str]) -> tuple[str, str | None]:
    """(URL, body or None) of a curl command line: `-s`, `-d BODY` or `-d @FILE`."""
    url, body, args = None, None, list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-s":
            continue
        if arg == "-d":
            body = args.pop(0)
        elif arg.startswith("-"):
            raise AssertionError(f"curl option {arg} is not one the test knows")
        else:
            url = arg
    return url, body


def _body(folder: Path, data: str) -> bytes:
    return (folder / data[1:]).read_bytes() if data.startswith("@") else data.encode()


def test_tf_serving_is_started_on_the_pushed_folder_with_the_stacks_serving_image(page_run):
    folder, _ = page_run
    [argv] = _calls(page_run, "docker")
    assert argv[:2] == ["run", "--rm"]
    assert argv[argv.index("-p") + 1] == "8501:8501"
    assert argv[argv.index("-v") + 1] == f"{folder}/outputs/serving/cifar10:/models/cifar10"
    assert argv[argv.index("-e") + 1] == "MODEL_NAME=cifar10"
    assert argv[-1] == f"tensorflow/serving:{serving_api_version()}"


def test_every_request_shown_is_answered_by_the_signature_it_names(page_run, signatures):
    folder, _ = page_run
    asked = []
    for argv in _calls(page_run, "curl"):
        url, data = _curl_request(argv)
        if data is None:
            assert url == "http://localhost:8501/v1/models/cifar10"  # the model's status
            continue
        assert url == "http://localhost:8501/v1/models/cifar10:predict"
        body = _body(folder, data)
        name, _, _ = rest.decode_predict_request(body, signatures)
        answer = rest.predict(body, signatures)
        [prediction] = answer["predictions"]
        assert len(prediction["probabilities"]) == len(LABEL_NAMES)
        assert prediction["classes"] in LABEL_NAMES
        asked.append(name)
    assert sorted(asked) == ["serving_default", "serving_examples"]


def test_both_signatures_see_the_same_image(page_run, signatures):
    """The tf.Example the page builds holds the pixels of the image file it encodes."""
    folder, _ = page_run
    images = rest.predict((folder / "images.json").read_bytes(), signatures)
    examples = rest.predict((folder / "examples.json").read_bytes(), signatures)
    assert images["predictions"][0]["probabilities"] == pytest.approx(
        examples["predictions"][0]["probabilities"], abs=1e-6
    )


def test_the_documented_answer_has_the_models_shape(page_run, signatures):
    [shown] = [json.loads(block) for block in blocks("json")]
    answer = rest.predict((page_run[0] / "images.json").read_bytes(), signatures)
    assert {k: sorted(v[0]) for k, v in shown.items()} == {
        k: sorted(v[0]) for k, v in answer.items()
    }
    [row] = shown["predictions"]
    assert len(row["probabilities"]) == len(LABEL_NAMES)
    assert sum(row["probabilities"]) == pytest.approx(1.0)
    assert LABEL_NAMES[max(range(10), key=row["probabilities"].__getitem__)] == row["classes"]


def test_the_vertex_request_is_one_the_default_signature_takes(page_run, signatures):
    folder, _ = page_run
    [argv] = _calls(page_run, "gcloud")
    assert argv[:4] == ["ai", "endpoints", "predict", "ENDPOINT_ID"]
    [request] = [a.removeprefix("--json-request=") for a in argv if a.startswith("--json-request=")]
    columns = rest.decode_vertex_request((folder / request).read_bytes(), signatures)
    assert list(columns) == ["images"] and len(columns["images"]) == 1


@pytest.mark.parametrize(
    "body, problem",
    [
        ('{"instances": [{"b64": "%s"}]}', None),
        ('{"instances": [{"image": {"b64": "%s"}}]}', "names ['image']"),
        ('{"signature_name": "serving_image", "instances": [{"b64": "%s"}]}', "no signature"),
        ('{"instances": ["%s"], "inputs": ["%s"]}', "exactly one"),
        ('{"instances": [{"b64": "%s!"}]}', "not base64"),
    ],
)
def test_the_rest_decoder_refuses_what_tf_serving_refuses(signatures, tmp_path, body, problem):
    """The stand-in for TF Serving's REST layer can fail: each refusal the page could trip."""
    import base64

    encoded = base64.b64encode(fx.write_png(tmp_path / "a.png").read_bytes()).decode()
    request = body.replace("%s", encoded).encode()
    if problem is None:
        assert len(rest.predict(request, signatures)["predictions"]) == 1
    else:
        with pytest.raises(rest.BadRequest, match=re.escape(problem)):
            rest.decode_predict_request(request, signatures)


def test_a_wrong_feature_name_in_the_example_fails(signatures):
    """serving_examples needs `image_raw`: an Example without it is not answered."""
    import base64

    import tensorflow as tf

    raw = tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(3072)]))
    example = tf.train.Example(features=tf.train.Features(feature={"image": raw}))
    encoded = base64.b64encode(example.SerializeToString()).decode()
    body = json.dumps({"signature_name": "serving_examples", "instances": [{"b64": encoded}]})
    with pytest.raises(tf.errors.InvalidArgumentError):
        rest.predict(body.encode(), signatures)


def test_the_page_is_linked_from_the_readme():
    assert "(docs/serving.md)" in (REPO / "README.md").read_text()
