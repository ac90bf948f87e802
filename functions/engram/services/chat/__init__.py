"""The chat gateway: one request from the door to the upstream and back, and the writes it owes."""
