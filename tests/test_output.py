"""output.last_words, in-process: what it does to an alarm set before it."""

import signal

import pytest

from ftcli.output import last_words


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="SIGALRM: POSIX only")
def test_last_words_puts_back_an_alarm_set_before_it_with_the_time_it_had_left():
    # pytest-timeout's "signal" method times each test with SIGALRM: last_words took the timer for its own patience
    # and, done, set it to 0, so a test that went on to hang after it hung with no timeout
    rang = []

    def outer(signum, frame):
        rang.append(signum)

    before = signal.signal(signal.SIGALRM, outer)
    before_timer = signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        with last_words(patience=5):
            pass
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert signal.getsignal(signal.SIGALRM) is outer
        assert 25 < left <= 30
        assert rang == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before_timer)
        signal.signal(signal.SIGALRM, before)
