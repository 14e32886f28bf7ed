"""The Task runtime: one abstraction for everything that runs concurrently.

The built-in task kinds are imported when their type is first asked for (see
:mod:`taskloom.tasks.kinds`), not with the package: a session loads only those it meets.
"""
