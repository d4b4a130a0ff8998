"""The default torch CPU thread count: half the cores, at least 1, at most 4."""

import pytest

from polyrl.policy.threads import default_threads


@pytest.mark.parametrize("cores, threads", [(1, 1), (2, 1), (3, 1), (4, 2), (6, 3), (8, 4), (64, 4)])
def test_default_threads_is_half_the_cores_between_1_and_4(cores, threads):
    assert default_threads(cores) == threads
