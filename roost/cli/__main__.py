"""``python -m roost.cli``: the ``roost`` command."""

from roost.cli import main

main()
