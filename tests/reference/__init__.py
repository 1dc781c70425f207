"""Reference engines the tests (and benchmarks) compare the shipped ones with; not shipped. Not the rule:
that is `slurm_drf.policy.rule` (the greedy loop, the H-DRF walk), shipped.

`nested_heaps`: H-DRF with the paper's saturation, the fast reference the
property tests check the paper's guarantees on. `naive_hdrf`: the paper's
naive variants (rescaling alone, the plain roll-up), for its counterexamples.
"""
