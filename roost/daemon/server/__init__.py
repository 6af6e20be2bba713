"""The socket side: the listener, connections, the operations table, authority and subscriptions."""
