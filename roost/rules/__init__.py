"""Pure rules: what views show and what the daemon closes when, as functions of rows, config and time."""
