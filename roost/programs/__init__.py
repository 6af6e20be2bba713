"""The programs that run inside a worker: roost's own agents, speaking the worker protocol on stdio.

The daemon starts them as ``python -m roost.programs.NAME`` (see roost/drivers/), each under its
shim, ``shim.py``, which it runs by path (roost/daemon/processes/shim_link.py); they import neither
the daemon nor the drivers, and the daemon imports none of them.
"""
