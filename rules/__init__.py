"""Rules: each module is one rewrite or check, its own spec."""
