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
    timed = 1 + 3 * 4                                   # the warmup call, then the repeats
    assert len(calls) >= timed + 1                      # at least one untimed warming call
    assert calls[-timed] - t0 >= 0.05 + 0.05            # the timed calls start after warming
