"""Exit statuses of `cifar10-pipeline`, so that scripts can tell failures apart. Kept
below the CLI so every command module returns the same named values."""

OK = 0
ERROR = 1  # unexpected failure (the log file has the traceback)
BAD_INPUT = 2  # bad data source, bad arguments, unusable output dir, unreadable image
DATA_INVALID = 3  # data validation found anomalies; nothing was trained
NOT_BLESSED = 4  # the model failed the accuracy gate; nothing was pushed
LOST_CONTACT = 5  # submitted, but `submit --wait` lost contact; the job may still run
SERVED_CHANGED = 6  # another version was pushed during the run; nothing pushed, rerun
STALE = 7  # status: nothing served, older than --max-age, dated ahead, or a rollback unfinished
LAST_NIGHT_RED = 8  # status: the last night's outcome was red (see nights.RED_OUTCOMES)
LOAD_TEST_FAILED = 9  # the staged version failed its load test; nothing pushed, served stays
BUSY = 10  # another run holds the output folder; nothing was done, try again later

# Each status in a few words, for `--help` (README's "When a command exits non-zero" has the
# whole table; tests/test_exit_statuses.py holds both to the constants above).
MEANINGS = {
    OK: "ok",
    ERROR: "unexpected error",
    BAD_INPUT: "bad input",
    DATA_INVALID: "data failed validation",
    NOT_BLESSED: "model not blessed",
    LOST_CONTACT: "submit --wait lost contact (the job may still run)",
    SERVED_CHANGED: "another version was pushed during the run (nothing pushed)",
    STALE: "status: stale or nothing served",
    LAST_NIGHT_RED: "status: the last night was red",
    LOAD_TEST_FAILED: "the staged version failed its load test (nothing pushed)",
    BUSY: "another run holds the output folder (nothing done, try later)",
}


def epilog() -> str:
    return "exit status: " + ", ".join(f"{code} {said}" for code, said in MEANINGS.items())
