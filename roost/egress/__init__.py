"""The egress proxy a job whose network is ``allow`` goes out through (docs/isolation.md#network):
the request head it reads and the relay; run per job by roost/programs/egress_proxy.py."""
