"""Cluster-scale discrete-event simulator of a rollout: N instances, the same policy objects as the
real router, and a calibrated step-time model in place of the engines."""
