"""``python -m sluice_worker --socket PATH --package DIR --entry module:Class``."""

import argparse

from .server import serve


def main():
    parser = argparse.ArgumentParser(prog="sluice_worker", description=__doc__)
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument("--package", required=True, help="the handler's package directory")
    parser.add_argument("--entry", required=True, help="the handler class, as module:Class")
    args = parser.parse_args()
    serve(args.socket, args.package, args.entry)


if __name__ == "__main__":
    main()
