"""The engine: each job's mailbox, its transitions and the effects they start."""
