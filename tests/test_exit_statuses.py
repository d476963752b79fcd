"""The README's table of exit statuses and outcomes is the code's own list: every status
`pipeline/common/exit_status.py` defines has a row and no row names one it does not, and
every outcome a night can have sits in the row of the status it exits with."""

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SECTION = "### When a command exits non-zero"


def _rows() -> dict[int, list[str]]:
    """{status: [its cells]} of the README's table."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            assert int(cells[0]) not in rows, f"status {cells[0]} has two rows"
            rows[int(cells[0])] = cells
    return rows


def _defined() -> dict[str, int]:
    from pipeline.common import exit_status

    return {k: v for k, v in vars(exit_status).items() if k.isupper() and isinstance(v, int)}


def test_every_status_the_code_defines_has_one_row_and_no_other():
    assert set(_rows()) == set(_defined().values())
    assert len(set(_defined().values())) == len(_defined()), "two names for one status"


def test_every_outcome_is_in_the_row_of_its_exit_status():
    from components.night_report import message as nights
    from components.night_report.compose import EXIT_STATUS
    from pipeline.common import exit_status

    outcomes = {**EXIT_STATUS, **dict.fromkeys(nights.ON_THEIR_OWN, exit_status.BUSY)}
    assert set(nights.RED_OUTCOMES) <= set(outcomes)
    rows = _rows()
    for outcome, status in outcomes.items():
        named = re.findall(r"`([a-z_]+)`", rows[status][1])
        assert outcome in named, f"README: outcome {outcome} is not in the row of status {status}"
    named_anywhere = {o for cells in rows.values() for o in re.findall(r"`([a-z_]+)`", cells[1])}
    assert named_anywhere <= set(outcomes), f"no such outcome: {named_anywhere - set(outcomes)}"


def test_the_help_lists_every_status():
    from pipeline import cli

    epilog = cli.build_parser().epilog
    for code in _defined().values():
        assert re.search(rf"(^|, |: ){code} ", epilog), f"--help does not explain {code}"
