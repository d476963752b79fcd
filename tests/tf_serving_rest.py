"""TF Serving's REST predict API, as far as docs/serving.md uses it: a request body decoded
into a signature's input tensors, and the signature's outputs written as the response.

It follows TF Serving's documented JSON mapping (tensorflow.org/tfx/serving/api_rest,
"Request format" and "Encoding binary values"), and is stricter where that helps a test:

- the body is a JSON object with `signature_name` (default `serving_default`) and exactly one
  of `instances` (row format) or `inputs` (columnar); any other key is refused;
- in `instances`, each element is the sole input's value, or an object naming every input;
- a string tensor's value is a JSON string (its UTF-8 bytes) or `{"b64": "..."}` (standard
  base64, checked);
- the row-format response is `{"predictions": [...]}`, one element per instance: the sole
  output's value, or an object of every output (strings as JSON strings).

Vertex AI's prebuilt TensorFlow containers pass `instances` to the model's
`serving_default`: `decode_vertex_request` takes only that (and ignores `parameters`).
"""

from __future__ import annotations

import base64
import binascii
import json


class BadRequest(ValueError):
    """What TF Serving answers with HTTP 400."""


DEFAULT_SIGNATURE = "serving_default"


def _value(value, name: str):
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise BadRequest(f"input {name!r}: an object value must be {{'b64': string}}")
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as error:
            raise BadRequest(f"input {name!r}: not base64 ({error})") from None
    if isinstance(value, str):
        return value.encode()
    raise BadRequest(f"input {name!r}: a string tensor takes strings or b64 objects")


def _named(element) -> bool:
    return isinstance(element, dict) and set(element) != {"b64"}


def _rows(instances, inputs: list[str]) -> dict[str, list[bytes]]:
    if not isinstance(instances, list) or not instances:
        raise BadRequest("'instances' must be a non-empty list")
    columns: dict[str, list[bytes]] = {name: [] for name in inputs}
    for element in instances:
        if _named(element):
            if set(element) != set(inputs):
                raise BadRequest(f"an instance names {sorted(element)}, the signature {inputs}")
            for name in inputs:
                columns[name].append(_value(element[name], name))
        elif len(inputs) == 1:
            columns[inputs[0]].append(_value(element, inputs[0]))
        else:
            raise BadRequest(f"the signature has inputs {inputs}: name them in each instance")
    return columns


def _columns(value, inputs: list[str]) -> dict[str, list[bytes]]:
    if isinstance(value, dict) and set(value) != {"b64"}:
        if set(value) != set(inputs):
            raise BadRequest(f"'inputs' names {sorted(value)}, the signature {inputs}")
        named = value
    elif len(inputs) == 1:
        named = {inputs[0]: value}
    else:
        raise BadRequest(f"the signature has inputs {inputs}: name them in 'inputs'")
    columns = {}
    for name, values in named.items():
        if not isinstance(values, list):
            raise BadRequest(f"input {name!r}: expected a list (one value per example)")
        columns[name] = [_value(v, name) for v in values]
    return columns


def input_names(signature) -> list[str]:
    """The signature's input names; every one must be a string tensor of shape [None]."""
    _, specs = signature.structured_input_signature
    for name, spec in specs.items():
        if spec.dtype.name != "string" or spec.shape.as_list() != [None]:
            raise AssertionError(
                f"input {name!r} is {spec}: this emulator decodes tf.string [None]"
            )
    return sorted(specs)


def decode_predict_request(body: bytes, signatures) -> tuple[str, dict[str, list[bytes]], str]:
    """(signature name, input name -> values, "row" or "columnar") of a :predict body."""
    try:
        request = json.loads(body)
    except ValueError as error:
        raise BadRequest(f"not JSON ({error})") from None
    if not isinstance(request, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(request) - {"signature_name", "instances", "inputs"}
    if unknown:
        raise BadRequest(f"unknown keys {sorted(unknown)}")
    if ("instances" in request) == ("inputs" in request):
        raise BadRequest("expected exactly one of 'instances' or 'inputs'")
    name = request.get("signature_name", DEFAULT_SIGNATURE)
    if name not in signatures:
        raise BadRequest(f"no signature {name!r} (the model has {sorted(signatures)})")
    inputs = input_names(signatures[name])
    if "instances" in request:
        return name, _rows(request["instances"], inputs), "row"
    return name, _columns(request["inputs"], inputs), "columnar"


def decode_vertex_request(body: bytes, signatures) -> dict[str, list[bytes]]:
    """The inputs of a Vertex AI prediction body ({"instances": [...]}) for serving_default."""
    request = json.loads(body)
    unknown = set(request) - {"instances", "parameters"}
    if unknown:
        raise BadRequest(f"a Vertex AI request takes 'instances' (and 'parameters'), not {unknown}")
    return _rows(request["instances"], input_names(signatures[DEFAULT_SIGNATURE]))


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return float(value) if hasattr(value, "__float__") else value


def predict(body: bytes, signatures) -> dict:
    """The response TF Serving writes for a :predict body."""
    import tensorflow as tf

    name, columns, layout = decode_predict_request(body, signatures)
    outputs = signatures[name](**{k: tf.constant(v, tf.string) for k, v in columns.items()})
    values = {k: _plain(v.numpy().tolist()) for k, v in outputs.items()}
    if layout == "columnar":
        return {"outputs": values if len(values) > 1 else next(iter(values.values()))}
    count = len(next(iter(values.values())))
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    return {"predictions": [{k: v[i] for k, v in values.items()} for i in range(count)]}
