"""time_settled: a pause, then untimed calls for the warm-up period, then the timed repeats."""
import time

from einloop.runtime import Timing, time_settled


def test_time_settled_pauses_warms_then_times():
    calls = []
    t0 = time.perf_counter()
    t = time_settled(lambda: calls.append(time.perf_counter()), number=3, repeat=4,
                     pause_s=0.05, warm_s=0.05)
    assert isinstance(t, Timing) and len(t.results) == 4
    assert calls[0] - t0 >= 0.05                        # nothing ran during the pause
    warm = [c for c in calls if c < calls[0] + 0.05]
    assert len(warm) > 1                                # called repeatedly while warming (few
                                                        # calls when the machine is loaded)
    assert len(calls) >= len(warm) + 1 + 3 * 4          # then the warmup call and the repeats
