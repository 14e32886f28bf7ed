"""What wraps the engine for every conversation: its recording (see :mod:`.recorder`)."""
