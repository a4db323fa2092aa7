import atexit
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

# The suite's builds fill a compile cache of this session's own, never the user's
# (subprocesses inherit it; concurrent pytest processes each get their own directory).
_COMPILE_CACHE = tempfile.mkdtemp(prefix="einloop-test-cache-")
os.environ["EINLOOP_CACHE_DIR"] = _COMPILE_CACHE
atexit.register(shutil.rmtree, _COMPILE_CACHE, True)

# torch.compile's caches too: Inductor keys a compiled graph by its code, not by the schemas of
# the custom ops it calls, so a graph cached by an older checkout (same test op names, another
# schema) would be replayed against today's ops.
_INDUCTOR_CACHE = os.path.join(_COMPILE_CACHE, "torchinductor")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE

# A rule of the auto-scheduler that raises is a bug to see, not a space to relax quietly
# (einloop.autotune.space.sketch.generate): raise it, here and in every worker process.
os.environ["EINLOOP_STRICT_RULES"] = "1"


def pytest_configure(config):
    """Ctrl-C tests send SIGINT to this process; a shell that starts the suite in the background
    (``make test &``) hands it SIGINT ignored, and Python then never raises KeyboardInterrupt.
    Restore Python's own handler so those tests test einloop, not how the suite was started."""
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _require_torch_in_ci()


def _require_torch_in_ci():
    """In CI the PyTorch tests must run: the test extra installs torch, so its absence there is
    a broken install, not a reason to skip them."""
    import importlib.util
    import pytest
    if os.environ.get("CI") and importlib.util.find_spec("torch") is None:
        raise pytest.UsageError("CI is set but torch is not installed: install the test extra "
                                "(pip install -e '.[test]', which pins torch==2.13.0)")
