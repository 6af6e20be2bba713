"""The roost daemon: the only writer of job records; runs workers and serves the control socket.

Nothing here imports the UI.
"""
