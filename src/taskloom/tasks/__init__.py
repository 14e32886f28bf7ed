"""The Task runtime: one abstraction for everything that runs concurrently."""
