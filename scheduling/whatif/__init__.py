"""What-if on the live state: the next hours replayed from now as they stand and with changes
(quotas, nodes, clusters, strategies), side by side (`services`: start and run one; `build`:
the live state as a scenario and the changes; `compare`: the two replays summed up)."""
