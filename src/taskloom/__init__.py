"""taskloom: a multi-agent task runtime and harness for LLM coding agents."""

__version__ = "0.1.0"
