"""What a command prints and where its log goes: the one ``error:`` line and
the exit code of a failure, tables and trees of node answers, and the log (its
level and form, a long-running process's log file, systemd's journal)."""
