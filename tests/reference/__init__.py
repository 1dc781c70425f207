"""Reference engines and oracles the tests (and benchmarks) compare the shipped engines with; not shipped.

`flat_oracle`: the textbook DRF heap loop on exact fractions (docs/rule.md
§2). `hierarchy_oracle`: the textbook H-DRF walk on the rule's fixed point,
with the paper's naive variants (rescale, roll-up). `nested_heaps`: H-DRF
with the paper's saturation, the fast reference the property tests check
the paper's guarantees on.
"""
