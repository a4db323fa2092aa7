import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    """Ctrl-C tests send SIGINT to this process; a shell that starts the suite in the background
    (``make test &``) hands it SIGINT ignored, and Python then never raises KeyboardInterrupt.
    Restore Python's own handler so those tests test einloop, not how the suite was started."""
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
