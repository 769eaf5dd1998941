"""Stand-in for Isaac Lab (which cannot run here): records what the launcher did."""
