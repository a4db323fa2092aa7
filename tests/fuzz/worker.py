"""The worker process: run the cases it reads on stdin, report phases and outcomes (see pool)."""
import faulthandler
import json
import os
import sys

from .harness import run_case


def main():
    # answers go to the original stdout; anything a kernel or LLVM prints goes to stderr
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    faulthandler.enable()

    def send(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    for line in sys.stdin:
        outcome = run_case(json.loads(line), report=lambda phase: send({"phase": phase}))
        send({"result": outcome})


if __name__ == "__main__":
    main()
