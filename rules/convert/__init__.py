"""The conversion's rules (DDP0xx), one module each: `ddpify.rule.ConvertRule` subclasses,
run in the order of their `step`."""
