"""`python -m ddpify.verify ORIGINAL CONVERTED [-- ARGS...]`."""

from ddpify.verify.command import main

main()
