"""The task protocol: its names and encodings, the arguments of a call, errors, and the rows kept
in the store.
"""
