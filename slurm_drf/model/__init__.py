"""The data every other part speaks: TRES vectors, nodes, jobs, snapshots, and their JSON."""
