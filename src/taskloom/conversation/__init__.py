"""What wraps the engine for every conversation, and what the front ends share around it.

Its recording (:mod:`.recorder`), what starts the next turn (:mod:`.next_input`) and the
shielded turn driver (:mod:`.turn_driver`).
"""
