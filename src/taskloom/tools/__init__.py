"""Model-facing tools: a pydantic input model each, run by the engine."""
