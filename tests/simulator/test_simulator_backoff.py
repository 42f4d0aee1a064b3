"""The back-off the Docker event watch and the Kubernetes reachability share."""

from __future__ import annotations

import pytest

from backends.kubernetes_reach import Reachability
from simulator.backoff import Backoff


def test_each_wait_doubles_up_to_the_ceiling_and_a_reset_starts_over() -> None:
    backoff = Backoff(0.2, 1.0)
    assert [backoff.next_delay() for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.2


@pytest.mark.parametrize(("first", "most"), [(0, 1.0), (-1, 1.0), (2.0, 1.0)])
def test_a_back_off_that_never_waits_or_shrinks_is_refused(first: float, most: float) -> None:
    with pytest.raises(ValueError, match="0 < first <= most"):
        Backoff(first, most)


def test_the_kubernetes_listing_waits_longer_after_each_failure_until_it_answers() -> None:
    reach = Reachability()
    assert [reach.failed("refused") for _ in range(3)] == [0.2, 0.4, 0.8]
    assert not reach.reachable and reach.health().detail == "refused"
    assert reach.answered() and reach.reachable
    assert reach.failed("refused") == 0.2
