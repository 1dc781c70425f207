"""The fast engines: the rule of `policy.rule` on arrays, equal to it position by position.

`order` orders a flat pool (`compute_before`, `order_pending`); `merge_engine` orders a tree
(`order_online`, `order_compiled`); `hierarchy` holds the tree and its layout; `tree_order` joins
Slurm's account tree to the merge engine for `policy.plan` (`order_tree`).
tests/unit/policy/test_rule_equals_engines.py holds them to the rule.
"""
