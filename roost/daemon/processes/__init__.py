"""Processes: worker processes, how a job's worker is launched, spare workers, the user's hooks."""
