"""The suite's own scheduling: the tests that share a pipeline run must reach one pytest-xdist
worker, or each worker builds that run again (minutes each). pytest-xdist 3.8 groups by
rewriting node ids, which pytest 9.2 ignores silently, and reads the groups before a
conftest's marks unless the conftest hook runs first: this test fails in either case."""

import pytest

from conftest import SHARED_RUN_FIXTURES, module_fixtures


def groups(item) -> set[str]:
    return {str(mark.args[0]) for mark in item.iter_markers("xdist_group")}


def test_tests_sharing_a_run_are_scheduled_as_one_group(request):
    items = request.session.items
    sharing = [i for i in items if set(i.fixturenames) & set(SHARED_RUN_FIXTURES)]
    for item in sharing:
        [first] = [n for n in SHARED_RUN_FIXTURES if n in item.fixturenames]
        assert first in groups(item), item.nodeid
    grouped = [i for i in items if groups(i)]
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist --dist loadgroup: only the marks are checked")
    if not grouped:
        pytest.skip("no grouped test is selected")
    # loadgroup schedules by the "@group" suffix it writes into each grouped node id
    for item in grouped:
        assert item.nodeid.endswith("@" + "_".join(sorted(groups(item)))), item.nodeid


def test_tests_sharing_their_modules_fixture_are_scheduled_as_one_group(request):
    """A module-scoped fixture (a trained model, a not-blessed run) is built once per worker
    that runs one of its tests: spread over two workers, it was built twice."""
    items = request.session.items
    sharing = [i for i in items if module_fixtures(i)]
    if not sharing:
        pytest.skip("no selected test uses a module-scoped fixture of its own module")
    for item in sharing:
        assert groups(item), f"{item.nodeid}: uses {module_fixtures(item)} but has no group"
    by_fixture = {}
    for item in sharing:
        for name in module_fixtures(item):
            key = f"{item.nodeid.split('::')[0]}::{name}"
            by_fixture.setdefault(key, set()).add(frozenset(groups(item)))
    spread = {key: found for key, found in by_fixture.items() if len(found) > 1}
    assert not spread, f"a module fixture's tests in several groups: {spread}"
