"""``python -m roost.daemon``: run the daemon in the foreground (``roost daemon start`` backgrounds it)."""

from __future__ import annotations

import argparse
import logging
import sys

from roost import paths as paths_mod
from roost.daemon.server.listener import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="roost-daemon")
    parser.add_argument("--config", help="config file (default: ROOST_CONFIG or the platform config dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(paths_mod.resolve(), paths_mod.config_file(args.config))


if __name__ == "__main__":
    sys.exit(main())
