"""Workers on other hosts over OpenSSH, or on the nodes of a Ray cluster (docs/hosts.md).

This package's own import is empty on purpose: ``roost.hosts.remote`` is shipped to the far side in
the worker bundle and ``roost.hosts.ray_actor`` to a Ray cluster by value; neither may pull in the
daemon-side modules (``link``, ``placement``, ``commands``, ``ray_relay``).
"""
