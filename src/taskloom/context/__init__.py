"""An agent's context window: how full it is, clearing old tool results, and compaction."""
