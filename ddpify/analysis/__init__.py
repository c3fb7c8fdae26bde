"""The analysis layer: what a parsed script is and does, read once and shared by every rule.

Nothing here imports from the rest of ddpify: the engines and the rules sit above it.
`anatomy.Anatomy` is the entry point.
"""
