"""Data sources: actors that read from outside and send each item on."""
