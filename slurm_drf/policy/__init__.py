"""The policy: pools, shares, levels, the DRF order, the tie rule, values. Pure: no I/O."""
