"""The ``einloop`` command line: ``einloop demo``."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="einloop", description="einloop tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="declare, schedule, build and check a dense layer; "
                                       "print its speed against NumPy")
    demo.add_argument("--size", type=int, default=512, help="M = N = K (default 512)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main
        demo_main(args.size, args.size, args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
