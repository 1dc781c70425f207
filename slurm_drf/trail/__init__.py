"""The audit trail: observers of each cycle, history, metrics, share reports, plan output, explain."""
