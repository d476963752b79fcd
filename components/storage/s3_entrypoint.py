"""A Kubeflow step's entrypoint when the artifact store is `s3://`: TFX's own
(`tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor`, same arguments), with
`s3://` registered for tf.io.gfile first (components/storage/object_store.py) and a quick exit last.

Why not TFX's entrypoint alone: tensorflow-io, which gives tf.io.gfile its `s3://`, makes every
process that used it abort at interpreter exit ("pure virtual method called", exit status
134, tensorflow/io#2039), after the step's outputs are written: the cluster would mark a
finished step failed. Here the step runs, its output metadata is written and closed, the
exit handlers run, the standard streams are flushed, and the process ends with os._exit and
the step's own status (0, or 1 with the traceback printed, or what absl/SystemExit said).

`compile --target kubeflow` writes this module as every step's command when the pipeline
root or the data is `s3://` (pipeline/kubeflow/compile.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import traceback

TFX_ENTRYPOINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"


def run(argv: list[str]) -> int:
    """TFX's entrypoint with `argv` (its flags, then the Beam arguments); the exit status."""
    import components  # noqa: F401  (Keras 2 and the oneDNN choice, as every entry point)
    from components.storage import object_store

    object_store.enable(object_store.S3)
    from absl import app
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor as tfx_entry

    try:
        app.run(tfx_entry.main, argv=[TFX_ENTRYPOINT, *argv], flags_parser=tfx_entry._parse_flags)
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    status = run(sys.argv[1:])
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
