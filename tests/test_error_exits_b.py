"""The second half of the exits of the bad-input table raised in a flow run, and `serve`'s at
Prefect's API (tests/test_error_exits.py says how they are run and checked): a file of their own
so that xdist (`--dist loadfile`) runs them on the other worker."""

from __future__ import annotations

import pytest

from tests.test_error_exits import make_lite_template, run_group


@pytest.fixture(scope="module")
def lite_template(tmp_path_factory: pytest.TempPathFactory):
    return make_lite_template(tmp_path_factory)


@pytest.mark.slow  # a temporary Prefect server, then RUN_ROUNDS flow runs of each exit
def test_each_exit_in_a_flow_run_is_one_line_every_time_second_half(lite_template, tmp_path):
    run_group("runs-b", lite_template, tmp_path)


@pytest.mark.slow  # Prefect's client, RUN_ROUNDS times
def test_serve_against_no_server_is_one_line_every_time(lite_template, tmp_path):
    run_group("serve", lite_template, tmp_path)
