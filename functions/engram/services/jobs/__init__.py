"""Background jobs: the registry and runner, the schedule, run records, and each job."""
