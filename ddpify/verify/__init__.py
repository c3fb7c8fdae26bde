"""`ddpify verify`: run a script and its DDP conversion and check they train the same.

Only the harness (ddpify.verify.harness and the modules it loads in the child processes)
imports torch; this package, the runner, the checks and the report never do.
"""
