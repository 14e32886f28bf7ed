"""``python -m taskloom``: the same as the ``taskloom`` command."""

from taskloom.cli.app import main

main()
