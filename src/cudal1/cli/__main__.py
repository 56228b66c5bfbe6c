"""``python -m cudal1.cli``: the same command line as the ``cudal1`` entry point."""

from cudal1.cli import main

main()
