"""The rules, installed as `ddpify.rules`: `convert/` holds the conversion's steps (DDP0xx),
`check/` the checks of distributed code (DDP1xx). Each module is one rule, named after it,
and carries its code, message, documentation and examples (ddpify/rule.py)."""
