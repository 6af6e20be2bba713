"""A job's walls (docs/isolation.md): what its worker may read, write, see and reach, built with
bubblewrap. ``walls`` holds the pure rules (levels, the bwrap command line, the environment kept),
``probe`` what this machine can do, ``enclose`` the launch of one job's worker inside its walls."""
