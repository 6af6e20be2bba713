"""Workers on other hosts over OpenSSH (docs/hosts.md).

This package's own import is empty on purpose: ``roost.hosts.remote`` is shipped to the far side in
the worker bundle and must not pull in the daemon-side modules (``link``, ``placement``, ``commands``).
"""
