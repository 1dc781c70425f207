"""The configuration: one YAML file, its schema, and the frozen Config it becomes."""
