"""The reconnect backoff schedule: exponential, capped, jittered by the injected rng."""

import random

import pytest

from kraftcore.net.backoff import Backoff


def test_no_jitter_doubles_from_base_up_to_the_cap():
    backoff = Backoff(base_ms=50, ms_max=1000, jitter=0.0, rng=random.Random(0))
    assert [backoff.delay_ms(n) for n in range(8)] == [0, 50, 100, 200, 400, 800, 1000, 1000]


def test_jitter_stays_within_its_band_around_the_exponential():
    backoff = Backoff(base_ms=50, ms_max=1000, jitter=0.2, rng=random.Random(1))
    for failures in range(1, 40):
        nominal = min(1000, 50 * 2 ** (failures - 1))
        for _ in range(20):
            assert nominal * 0.8 <= backoff.delay_ms(failures) <= nominal * 1.2


def test_jitter_actually_varies():
    backoff = Backoff(base_ms=100, ms_max=100, jitter=0.5, rng=random.Random(2))
    assert len({round(backoff.delay_ms(3), 6) for _ in range(20)}) > 10


def test_same_seed_same_schedule_and_one_draw_per_call():
    a = Backoff(10, 10_000, 0.2, random.Random(42))
    b = Backoff(10, 10_000, 0.2, random.Random(42))
    schedule = [a.delay_ms(n) for n in range(1, 12)]
    assert schedule == [b.delay_ms(n) for n in range(1, 12)]
    rng = random.Random(42)
    expected = [min(10_000, 10 * 2 ** (n - 1)) * rng.uniform(0.8, 1.2) for n in range(1, 12)]
    assert schedule == pytest.approx(expected)


def test_huge_failure_counts_stay_finite_and_capped():
    backoff = Backoff(base_ms=1, ms_max=5000, jitter=0.0)
    assert backoff.delay_ms(10_000) == 5000


@pytest.mark.parametrize("kwargs", [
    dict(base_ms=-1), dict(base_ms=100, ms_max=50), dict(jitter=1.0), dict(jitter=-0.1)])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)
