"""Each night's report, as the CLI uses it: the message code lives below the pipeline, in
components/night_report/message.py, where a compiled file's exit handler uses it too."""

from components.night_report.message import (  # noqa: F401
    ATTEMPTS,
    DELIVERY_SECONDS,
    LATEST_FILE,
    NIGHTS_DIR,
    NOTIFY_VARIABLE,
    RED_OUTCOMES,
    NotifyUrlError,
    check_url,
    deliver,
    latest,
    message,
    record,
    shown,
    stop_lines,
)
