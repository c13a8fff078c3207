"""Every Redis client: single, Sentinel and Cluster, and cluster routing."""
