"""The check rules (DDP1xx), one module each: `ddpify.rule.CheckRule` subclasses, each with
its text prefilter (`requires`)."""
