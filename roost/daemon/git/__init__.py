"""Git: running git, each job's worktree, teardown that keeps every commit, diffs and review."""
