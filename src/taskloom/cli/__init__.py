"""The ``taskloom`` command line."""
